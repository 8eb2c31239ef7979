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
# knowledge from the client) or h2_backend (HTTP/2 to the backends, HTTP/1.1 from the client).

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
    echo "access_log = false"
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
    echo "[[upstream]]"
    echo "name = \"b\""
    [ "$alg" = h2_backend ] && echo "backend_protocol = \"h2\""
    case $alg in tcp | h2 | tls | h2_backend) alg=round_robin ;; esac
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
    echo "http { access_log off; keepalive_requests 1000000; keepalive_timeout 60s;"
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
    echo "defaults"
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
    echo "  default_backend b"
    echo "backend b"
    echo "  balance $balance"
    [ "$alg" = tcp ] || echo "  http-reuse always"
    for addr in "${BACKENDS[@]}"; do
        i=$((i + 1))
        echo "  server s$i $addr maxconn 4000$([ "$alg" = h2_backend ] && echo " proto h2")"
    done
}
