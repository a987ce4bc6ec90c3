//! Cleaning HTML and Markdown into text blocks (the rules are in
//! [`crate::clean`] and docs/matrix-atom.md). Each parser is a well-kept
//! crate (`scraper` over html5ever, `pulldown-cmark`); this module only
//! decides which text counts and where blocks break.

use pulldown_cmark::{Event, Parser, Tag, TagEnd};
use scraper::{Html, Node};

/// Elements whose text never counts.
const SKIPPED: &[&str] = &[
    "script", "style", "noscript", "template", "head", "svg", "math",
];

/// Elements that start and end a block.
const BLOCKS: &[&str] = &[
    "address",
    "article",
    "aside",
    "blockquote",
    "body",
    "caption",
    "dd",
    "details",
    "div",
    "dl",
    "dt",
    "fieldset",
    "figcaption",
    "figure",
    "footer",
    "form",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "header",
    "hr",
    "html",
    "li",
    "main",
    "nav",
    "ol",
    "p",
    "pre",
    "section",
    "summary",
    "table",
    "td",
    "th",
    "tr",
    "ul",
];

/// Text blocks with their whitespace: collapsed outside `<pre>`.
#[derive(Default)]
struct Blocks {
    done: Vec<String>,
    current: String,
}

impl Blocks {
    fn text(&mut self, t: &str, pre: bool) {
        if pre {
            self.current.push_str(t);
            return;
        }
        for (i, word) in t.split(char::is_whitespace).enumerate() {
            if i > 0 && !self.current.ends_with([' ', '\n']) && !self.current.is_empty() {
                self.current.push(' ');
            }
            self.current.push_str(word);
        }
    }

    fn line_break(&mut self) {
        self.current.push('\n');
    }

    fn end(&mut self) {
        let b = std::mem::take(&mut self.current);
        let lines: Vec<&str> = b.lines().map(str::trim).collect();
        let b = lines.join("\n");
        let b = b.trim();
        if !b.is_empty() {
            self.done.push(b.to_owned());
        }
    }

    fn finish(mut self) -> String {
        self.end();
        self.done.join("\n\n")
    }
}

/// HTML: the text content, entities decoded, scripts, styles and the
/// head dropped, link text kept (never a URL), image alt text dropped,
/// block elements separated by a blank line, `<br>` a line break,
/// whitespace collapsed outside `<pre>`.
pub(crate) fn html_text(source: &str) -> String {
    let doc = Html::parse_document(source);
    let mut blocks = Blocks::default();
    walk(doc.tree.root(), &mut blocks, false);
    blocks.finish()
}

fn walk(node: ego_tree::NodeRef<'_, Node>, out: &mut Blocks, pre: bool) {
    match node.value() {
        Node::Text(t) => out.text(&t.text, pre),
        Node::Element(e) => {
            let name = e.name();
            if SKIPPED.contains(&name) {
                return;
            }
            if name == "br" {
                out.line_break();
                return;
            }
            let block = BLOCKS.contains(&name);
            if block {
                out.end();
            }
            let pre = pre || name == "pre";
            for child in node.children() {
                walk(child, out, pre);
            }
            if block {
                out.end();
            }
        }
        Node::Document | Node::Fragment => {
            for child in node.children() {
                walk(child, out, pre);
            }
        }
        _ => {}
    }
}

/// Markdown: the text without markup, link text kept (never a URL),
/// image alt text and raw HTML dropped, code kept as written, each block
/// (paragraph, heading, list item, code block, table row...) its own,
/// soft line breaks a space, hard ones a line break.
pub(crate) fn markdown_text(source: &str) -> String {
    let mut blocks = Blocks::default();
    let mut in_image = 0usize;
    let mut in_code = false;
    for event in Parser::new_ext(source, pulldown_cmark::Options::ENABLE_TABLES) {
        match event {
            Event::Start(Tag::Image { .. }) => in_image += 1,
            Event::End(TagEnd::Image) => in_image = in_image.saturating_sub(1),
            _ if in_image > 0 => {}
            Event::Start(Tag::CodeBlock(_)) => {
                blocks.end();
                in_code = true;
            }
            Event::End(TagEnd::CodeBlock) => {
                blocks.end();
                in_code = false;
            }
            Event::Start(
                Tag::Paragraph | Tag::Heading { .. } | Tag::Item | Tag::TableRow | Tag::TableHead,
            )
            | Event::End(
                TagEnd::Paragraph
                | TagEnd::Heading(_)
                | TagEnd::Item
                | TagEnd::TableRow
                | TagEnd::TableHead,
            ) => blocks.end(),
            Event::End(TagEnd::TableCell) => blocks.text(" ", false),
            Event::Text(t) | Event::Code(t) => blocks.text(&t, in_code),
            Event::SoftBreak => blocks.text(" ", false),
            Event::HardBreak => blocks.line_break(),
            _ => {}
        }
    }
    blocks.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn html_counts_text_not_markup_urls_alt_or_scripts() {
        let html = r#"<html><head><title>T</title><style>p{}</style></head><body>
            <h1>Caf&eacute; &amp; co</h1><p>Read   <a href="https://x.example/">the
            docs</a>.<img alt="a cat" src="c.png"><br>Next line</p>
            <script>var x = 1;</script><pre>  two
  spaces</pre><ul><li>one</li><li>two</li></ul></body></html>"#;
        assert_eq!(
            html_text(html),
            "Café & co\n\nRead the docs.\nNext line\n\ntwo\nspaces\n\none\n\ntwo"
        );
    }

    #[test]
    fn markdown_counts_text_not_markup_urls_or_alt() {
        let md = "# Title *here*\n\nSome [link text](https://x.example/) and `code`\nsoft.\n\n![alt words](i.png)\n\n- item one\n- item two\n\n```\nfn main() {}\n```\n\n<div>raw</div>\n";
        assert_eq!(
            markdown_text(md),
            "Title here\n\nSome link text and code soft.\n\nitem one\n\nitem two\n\nfn main() {}"
        );
    }
}
