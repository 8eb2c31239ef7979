# shellcheck shell=bash
# The configurations the bench scripts give the backends and the three proxies, one place for
# compare.sh (req/s, CPU) and instructions.sh (instructions under valgrind), so the two measure
# the same set-ups. Sourced, not run. Each function prints a configuration; the caller writes it
# where it wants and starts the program.
#
# They read:
#   BACKENDS       the backends' addresses, as the proxies name them (host:port);
#   BACKEND_PORTS  the ports the backends' nginx listens on (backends_10k: more than 3
#                  addresses in BACKENDS, all answered by the first port on a wildcard address);
#   WORK           where the TLS certificate is (cert.pem, key.pem and, for HAProxy, the two in
#                  combined.pem: see make_certificate) and where nginx keeps its temp files.
#
# ALGORITHM, in all of them: round_robin, least_conn or ip_hash (HTTP/1.1 to the backends), or
# a protocol case with round robin: tcp (L4), tls (TLS termination), h2 (HTTP/2 with prior
# knowledge from the client) or h2_backend (HTTP/2 to the backends, HTTP/1.1 from the client),
# or routes (round robin behind the 50 routes of `route_list`: nginx `server`s and
# `location`s, HAProxy `use_backend` rules, fulcrum `[[listener.route]]`s), or logs (round
# robin with each proxy's access log on, to a file in LOG_DIR, tmpfs (bench/lib.sh's
# work_dir says why), or WORK: `access_log_file PROXY`).

# access_log_file PROXY: where PROXY's access log goes in the logs case. nginx: `access_log`
# with its default format, `combined`, one write(2) a line (no `buffer=`, nginx's default).
# fulcrum: `access_log` to the file, its default `combined` format. HAProxy: `log stdout`
# with `option httplog`, its standard output sent to the file by whoever starts it: HAProxy
# has no file logging of its own, and `log stdout` is its way without a syslog daemon (one
# write(2) a line from the worker thread, as nginx); a syslog daemon or a reader on a unix
# socket would add a process whose CPU the table would not count.
access_log_file() {
    echo "${LOG_DIR:-$WORK}/access-$1.log"
}

# route_list: the routes case's 50 routes, one "HOST KIND PATH" line each (KIND: exact,
# prefix, wins for `^~`, regex), and the requests it sends spread over them ("request HOST
# PATH" lines, one a route). 10 hosts; each has an exact path and three prefixes; five have a
# regex and five another prefix.
route_list() {
    local i
    for i in 0 1 2 3 4 5 6 7 8 9; do
        local host=h$i.example.com
        echo "$host exact /status"
        echo "$host prefix /api/"
        echo "$host prefix /app/"
        echo "$host wins /static/"
        if [ "$i" -lt 5 ]; then
            echo "$host regex \\.(png|jpg|css)\$"
        else
            echo "$host prefix /v2/"
        fi
        echo "request $host /status"
        echo "request $host /api/users/42?page=2"
        echo "request $host /app/settings"
        echo "request $host /static/site.css"
        if [ "$i" -lt 5 ]; then
            echo "request $host /img/logo.png"
        else
            echo "request $host /v2/orders"
        fi
    done
}

# routes_lua: a wrk script that sends route_list's requests in turn, each with its Host.
routes_lua() {
    echo "local requests = {}"
    echo "local n = 0"
    echo "init = function(args)"
    route_list | awk '$1 == "request" { printf "  table.insert(requests, wrk.format(\"GET\", \"%s\", { Host = \"%s\" }))\n", $3, $2 }'
    echo "end"
    echo "request = function()"
    echo "  n = n % #requests + 1"
    echo "  return requests[n]"
    echo "end"
}

# make_certificate: a self-signed ECDSA P-256 certificate for 127.0.0.1 and localhost in WORK
# (cert.pem, key.pem), and both in combined.pem, the one file HAProxy wants.
make_certificate() {
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
        -subj /CN=localhost -addext subjectAltName=DNS:localhost,IP:127.0.0.1 \
        -keyout "$WORK/key.pem" -out "$WORK/cert.pem" 2>/dev/null
    cat "$WORK/cert.pem" "$WORK/key.pem" >"$WORK/combined.pem"
}

# backends_config DIR PROCESSES LISTEN [ACCESS_LOG]: the backends, one nginx answering a small
# 200 on each of BACKEND_PORTS (or, with more than 3 BACKENDS, every address of the first port).
# LISTEN is added to each `listen` (" http2": h2c only). ACCESS_LOG: a file where each request
# answered is a line (off without it).
backends_config() {
    local dir=$1 procs=$2 listen=$3 log=${4:-} port addr
    echo "worker_processes $procs; pid $dir/nginx.pid; error_log $dir/logs/error.log warn;"
    echo "worker_rlimit_nofile $(ulimit -Hn);"
    echo "events { worker_connections $((${#BACKENDS[@]} > 3 ? 3 * ${#BACKENDS[@]} / 2 : 8192)); }"
    if [ -n "$log" ]; then
        echo "http { log_format n '.'; access_log $log n;"
    else
        echo "http { access_log off;"
    fi
    echo "  keepalive_requests 1000000; keepalive_timeout 60s;"
    echo "  client_body_temp_path $dir; proxy_temp_path $dir; fastcgi_temp_path $dir;"
    echo "  uwsgi_temp_path $dir; scgi_temp_path $dir;"
    for port in "${BACKEND_PORTS[@]}"; do
        addr=127.0.0.1:$port
        if [ "${#BACKENDS[@]}" -gt 3 ]; then addr=$port; fi
        # The \n is for nginx (the body's newline), not for echo.
        # shellcheck disable=SC2028
        echo "  server { listen $addr$listen; location / { return 200 \"backend $port\\n\"; } }"
        if [ "${#BACKENDS[@]}" -gt 3 ]; then break; fi
    done
    echo "}"
}

# fulcrum_config ALGORITHM WORKERS PORT KEEPALIVE: fulcrum, access log off, listening on
# 127.0.0.1:PORT, KEEPALIVE idle connections kept per backend.
fulcrum_config() {
    local alg=$1 workers=$2 port=$3 keepalive=$4 addr
    echo "workers = $workers"
    if [ "$alg" = logs ]; then
        echo "access_log = \"$(access_log_file fulcrum)\""
    else
        echo "access_log = false"
    fi
    echo "[[listener]]"
    echo "listen = \"127.0.0.1:$port\""
    echo "upstream = \"b\""
    case $alg in
        tcp) echo "protocol = \"tcp\"" ;;
        h2) echo "http2 = true" ;;
        tls)
            echo "[[listener.tls]]"
            echo "cert = \"$WORK/cert.pem\""
            echo "key = \"$WORK/key.pem\""
            ;;
    esac
    if [ "$alg" = routes ]; then
        route_list | while read -r host kind path; do
            [ "$host" != request ] || continue
            echo "[[listener.route]]"
            echo "host = [\"$host\"]"
            case $kind in
                exact) echo "path_exact = \"$path\"" ;;
                prefix) echo "path = \"$path\"" ;;
                wins) printf 'path = "%s"\nprefix_wins = true\n' "$path" ;;
                regex) echo "path_regex = '$path'" ;;
            esac
            echo "upstream = \"b\""
        done
    fi
    echo "[[upstream]]"
    echo "name = \"b\""
    [ "$alg" = h2_backend ] && echo "backend_protocol = \"h2\""
    case $alg in tcp | h2 | tls | h2_backend | routes | logs) alg=round_robin ;; esac
    echo "algorithm = \"$alg\""
    echo "keepalive = $keepalive"
    for addr in "${BACKENDS[@]}"; do
        echo "[[upstream.backend]]"
        echo "addr = \"$addr\""
    done
}

# nginx_config ALGORITHM WORKERS PORT DIR [ONE_PROCESS]: nginx as the proxy, its pid and logs
# in DIR. ONE_PROCESS (any word): no master process, so that valgrind follows all of nginx
# (WORKERS is then 1).
nginx_config() {
    local alg=$1 workers=$2 port=$3 dir=$4 one=${5:-} balance="" addr
    case $alg in
        least_conn) balance="least_conn;" ;;
        ip_hash) balance="ip_hash;" ;;
    esac
    # The stream module (tcp), which Debian builds as a module, loaded before anything else.
    [ "$alg" != tcp ] || echo "load_module /usr/lib/nginx/modules/ngx_stream_module.so;"
    [ -z "$one" ] || echo "master_process off;"
    echo "worker_processes $workers; pid $dir/nginx.pid; error_log $dir/logs/error.log warn;"
    echo "events { worker_connections 8192; }"
    if [ "$alg" = tcp ]; then
        echo "stream { upstream b {"
        for addr in "${BACKENDS[@]}"; do echo "    server $addr;"; done
        echo "  }"
        echo "  server { listen 127.0.0.1:$port; proxy_pass b; } }"
        return
    fi
    if [ "$alg" = logs ]; then
        echo "http { access_log $(access_log_file nginx); keepalive_requests 1000000; keepalive_timeout 60s;"
    else
        echo "http { access_log off; keepalive_requests 1000000; keepalive_timeout 60s;"
    fi
    echo "  client_body_temp_path $dir; proxy_temp_path $dir; fastcgi_temp_path $dir;"
    echo "  uwsgi_temp_path $dir; scgi_temp_path $dir;"
    echo "  upstream b { $balance"
    for addr in "${BACKENDS[@]}"; do echo "    server $addr;"; done
    echo "    keepalive 1024; keepalive_requests 1000000; }"
    local listen=""
    case $alg in
        # The versions fulcrum and HAProxy speak: Debian's nginx 1.22 leaves TLS 1.3 out by
        # default, and a TLS 1.2 handshake is not the same work as a 1.3 one; with the session
        # cache nginx lacks by default (tickets are on by default).
        tls) listen=" ssl; ssl_protocols TLSv1.2 TLSv1.3; ssl_certificate $WORK/cert.pem; ssl_certificate_key $WORK/key.pem; ssl_session_cache shared:SSL:10m" ;;
        h2) listen=" http2" ;;
    esac
    if [ "$alg" = routes ]; then
        nginx_routes "$port"
        echo "}"
        return
    fi
    echo "  server { listen 127.0.0.1:$port$listen; location / {"
    if [ "$alg" = h2_backend ]; then
        # nginx's one module that speaks HTTP/2 to a backend; it carries plain requests too.
        echo "    grpc_pass grpc://b;"
        echo "    grpc_set_header X-Forwarded-For \$proxy_add_x_forwarded_for; } }"
    else
        echo "    proxy_pass http://b; proxy_http_version 1.1; proxy_set_header Connection \"\";"
        echo "    proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for; } }"
    fi
    echo "}"
}

# nginx_routes PORT: the routes case's servers (a default one first, for what no route takes),
# each location passing to upstream b as the other cases' `location /` does.
nginx_routes() {
    local port=$1 host kind path current=""
    echo "  proxy_http_version 1.1; proxy_set_header Connection \"\";"
    echo "  proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;"
    echo "  server { listen 127.0.0.1:$port; location / { proxy_pass http://b; } }"
    while read -r host kind path; do
        [ "$host" != request ] || continue
        if [ "$host" != "$current" ]; then
            [ -z "$current" ] || echo "  }"
            echo "  server { listen 127.0.0.1:$port; server_name $host;"
            current=$host
        fi
        case $kind in
            exact) echo "    location = $path { proxy_pass http://b; }" ;;
            prefix) echo "    location $path { proxy_pass http://b; }" ;;
            wins) echo "    location ^~ $path { proxy_pass http://b; }" ;;
            regex) echo "    location ~ $path { proxy_pass http://b; }" ;;
        esac
    done < <(route_list)
    echo "  }"
}

# haproxy_routes: the routes case's rules, in nginx's order of precedence for each host (exact
# paths, then the `^~` prefix, then the regex, then the other prefixes; HAProxy takes the
# first rule that matches, and every rule names backend b).
haproxy_routes() {
    local host kind path
    while read -r host kind path; do
        [ "$host" != request ] || continue
        local cond
        case $kind in
            exact) cond="path $path" ;;
            prefix | wins) cond="path_beg $path" ;;
            regex) cond="path_reg '$path'" ;;
        esac
        echo "  use_backend b if { hdr(host) -i $host } { $cond }"
    done < <(route_list | awk '$1 != "request" { o = ($2 == "exact" ? 0 : $2 == "wins" ? 1 : $2 == "regex" ? 2 : 3); print o, $0 }' | sort -s -n -k1,1 | cut -d" " -f2-)
}

# haproxy_config ALGORITHM WORKERS PORT: HAProxy (`nbthread WORKERS`), keep-alive both sides,
# X-Forwarded-For added, connections to the backends shared (`http-reuse always`).
haproxy_config() {
    local alg=$1 workers=$2 port=$3 balance=roundrobin i=0 addr
    case $alg in
        least_conn) balance=leastconn ;;
        ip_hash) balance=source ;;
    esac
    echo "global"
    echo "  nbthread $workers"
    echo "  maxconn 8000"
    [ "$alg" != logs ] || echo "  log stdout format raw local0 info"
    echo "defaults"
    [ "$alg" != logs ] || printf '  log global\n  option httplog\n'
    if [ "$alg" = tcp ]; then
        echo "  mode tcp"
    else
        echo "  mode http"
        echo "  option http-keep-alive"
        echo "  option forwardfor"
    fi
    echo "  timeout connect 5s"
    echo "  timeout client 60s"
    echo "  timeout server 60s"
    echo "frontend f"
    case $alg in
        tls) echo "  bind 127.0.0.1:$port ssl crt $WORK/combined.pem" ;;
        h2) echo "  bind 127.0.0.1:$port proto h2" ;;
        *) echo "  bind 127.0.0.1:$port" ;;
    esac
    [ "$alg" != routes ] || haproxy_routes
    echo "  default_backend b"
    echo "backend b"
    echo "  balance $balance"
    [ "$alg" = tcp ] || echo "  http-reuse always"
    for addr in "${BACKENDS[@]}"; do
        i=$((i + 1))
        echo "  server s$i $addr maxconn 4000$([ "$alg" = h2_backend ] && echo " proto h2")"
    done
}
