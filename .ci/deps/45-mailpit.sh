# Mailpit (a real SMTP server with an HTTP API that shows what arrived) for
# the notification tests: built once into $KEEL_CI_CACHE/bin (about 3
# minutes cold, then cached; a marker file records the version, since
# `go install` builds do not). Tests start `mailpit` themselves
# (internal/testenv.Mailpit).
mailpit_version=v1.33.1
mailpit_bin="$KEEL_CI_CACHE/bin/mailpit"
mailpit_mark="$KEEL_CI_CACHE/bin/.mailpit-$mailpit_version"
if [ ! -x "$mailpit_bin" ] || [ ! -e "$mailpit_mark" ]; then
  echo "ci: building mailpit $mailpit_version (cached in $KEEL_CI_CACHE/bin)"
  (cd "$KEEL_CI_CACHE" && GOBIN="$KEEL_CI_CACHE/bin" GOFLAGS=-p=1 nice -n 10 go install "github.com/axllent/mailpit@$mailpit_version")
  touch "$mailpit_mark"
fi
export KEEL_TEST_MAILPIT="$mailpit_bin"
