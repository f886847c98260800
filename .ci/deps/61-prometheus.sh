# Prometheus and promtool from Debian for the metrics integration test
# (scrapes keel serve; PromQL checked with `promtool query instant`). The
# package is not started as a service here: tests start their own server.
if ! command -v prometheus >/dev/null 2>&1 || ! command -v promtool >/dev/null 2>&1; then
  echo "ci: installing prometheus"
  prom_sudo=""; [ "$(id -u)" -ne 0 ] && prom_sudo=sudo
  $prom_sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $prom_sudo apt-get install -y -qq --no-install-recommends prometheus >/dev/null
fi
export KEEL_TEST_PROMETHEUS="$(command -v prometheus)"
export KEEL_TEST_PROMTOOL="$(command -v promtool)"
