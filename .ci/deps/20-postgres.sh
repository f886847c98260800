# PostgreSQL 15 (Debian) for the PostgreSQL journal backend and the cluster tests. Each
# test binary starts a private cluster of its own (internal/testenv.Postgres);
# nothing is started here. The package's own main cluster, if apt starts one,
# is not used.
pgbin=/usr/lib/postgresql/15/bin
if [ ! -x "$pgbin/initdb" ]; then
  echo "ci: installing postgresql-15"
  sudo=""; [ "$(id -u)" -ne 0 ] && sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends postgresql-15 >/dev/null
fi
export KEEL_TEST_PG_BINDIR="$pgbin"
