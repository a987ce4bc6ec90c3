-- wrk request mix for benches/load: ZT_MANIFEST_SHARE of the requests ask
-- for the manifest, the rest for one random byte range of the file
-- (4 KiB to 1 MiB). Set by the bench:
--   ZT_FILE       path of the file's bytes (ztserve: /v1/files/F, nginx: /F)
--   ZT_MANIFEST   ztserve: the manifest path; nginx: unset
--   ZT_TAIL       nginx: bytes from the manifest's start to the end
--   ZT_SIZE       the file's size in bytes
local file = os.getenv("ZT_FILE")
local manifest = os.getenv("ZT_MANIFEST")
local tail = tonumber(os.getenv("ZT_TAIL") or "0")
local size = tonumber(os.getenv("ZT_SIZE"))
local share = tonumber(os.getenv("ZT_MANIFEST_SHARE") or "0.2")

local counter = 0
setup = function(thread)
  counter = counter + 1
  thread:set("seed", counter)
end

init = function(args)
  math.randomseed(seed * 7919 + os.time())
end

request = function()
  if math.random() < share then
    if manifest then
      return wrk.format("GET", manifest)
    end
    return wrk.format("GET", file, { Range = "bytes=-" .. tail })
  end
  local len = math.random(4096, 1048576)
  local start = math.random(0, size - len)
  return wrk.format("GET", file, { Range = "bytes=" .. start .. "-" .. (start + len - 1) })
end
