# Sourced by the benchmark scripts: nginx as their peer (2 workers,
# sendfile on, no access log), its config, pid, logs and temporaries
# under DIR.
#   nginx_start DIR PORT 'LOCATION BLOCK'
#   nginx_stop DIR
nginx_start() {
    local dir=$1 port=$2 location=$3
    mkdir -p "$dir/tmp"
    cat > "$dir/nginx.conf" <<NGINX
worker_processes 2;
pid $dir/nginx.pid;
error_log $dir/nginx-error.log;
events { worker_connections 1024; }
http { access_log off; sendfile on; tcp_nopush on;
  client_body_temp_path $dir/tmp; proxy_temp_path $dir/tmp; fastcgi_temp_path $dir/tmp;
  uwsgi_temp_path $dir/tmp; scgi_temp_path $dir/tmp;
  server { listen 127.0.0.1:$port; $location } }
NGINX
    nginx -c "$dir/nginx.conf"
}

nginx_stop() { nginx -c "$1/nginx.conf" -s stop 2>/dev/null || true; }
