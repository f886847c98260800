# Temporal CLI (with its dev server) for the keel worker acceptance tests:
# built once into $KEEL_CI_CACHE/bin (about 9 minutes cold, then cached; a
# marker file records the version, since `go install` builds report
# 0.0.0-DEV). Tests start `temporal server start-dev` themselves.
temporal_version=v1.5.1
temporal_bin="$KEEL_CI_CACHE/bin/temporal"
temporal_mark="$KEEL_CI_CACHE/bin/.temporal-$temporal_version"
if [ ! -x "$temporal_bin" ] || [ ! -e "$temporal_mark" ]; then
  echo "ci: building temporal $temporal_version (cached in $KEEL_CI_CACHE/bin)"
  (cd "$KEEL_CI_CACHE" && GOBIN="$KEEL_CI_CACHE/bin" GOFLAGS=-p=1 go install "github.com/temporalio/cli/cmd/temporal@$temporal_version")
  touch "$temporal_mark"
fi
export KEEL_TEST_TEMPORAL="$temporal_bin"
