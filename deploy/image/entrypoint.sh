#!/bin/sh
# Entry point of the server image (Containerfile): the first argument names the process, as in the
# Procfile; static files were collected at build time.
set -eu
cmd=${1:-web}
[ $# -gt 0 ] && shift
case "$cmd" in
web)
    python manage.py web_preflight  # one line and exit 1 where the web process would refuse (set -e)
    exec uvicorn config.asgi:application --host "${HOST:-0.0.0.0}" --port "${PORT:-8000}" \
        --workers "${WEB_WORKERS:-2}" --http httptools --loop uvloop --timeout-graceful-shutdown 30 --ws websockets-sansio --ws-ping-interval 120 --ws-ping-timeout 60 --ws-max-size 262144 --lifespan off --proxy-headers "$@" ;;
worker)
    exec python manage.py rundramatiq --queues scheduler notifications default \
        --processes "${WORKER_PROCESSES:-2}" --threads "${WORKER_THREADS:-4}" "$@" ;;
estimates)
    exec nice -n "${ESTIMATES_NICE:-10}" python manage.py rundramatiq --queues estimates --processes 1 --threads 1 "$@" ;;
clock)
    exec python manage.py clock "$@" ;;
migrate)
    exec python manage.py migrate --noinput "$@" ;;
manage)
    exec python manage.py "$@" ;;
*)
    exec "$cmd" "$@" ;;
esac
