# Jaeger v2 (OTLP receiver and trace store with a query API) for the
# telemetry integration tests. `go install` cannot build it (its module has
# replace directives), so it is built once in a scratch module under the
# cache; later runs reuse the binary.
jaeger_version=v1.76.0
jaeger_bin="$KEEL_CI_CACHE/bin/jaeger-$jaeger_version"
if [ ! -x "$jaeger_bin" ]; then
  echo "ci: building jaeger $jaeger_version (several minutes, once)"
  jaeger_src="$KEEL_CI_CACHE/src/jaeger-$jaeger_version"
  mkdir -p "$jaeger_src" "$KEEL_CI_CACHE/bin"
  (
    cd "$jaeger_src"
    [ -f go.mod ] || go mod init scratch/jaeger >/dev/null 2>&1
    printf '//go:build tools\n\npackage tools\n\nimport _ "github.com/jaegertracing/jaeger/cmd/jaeger"\n' >tools.go
    go get "github.com/jaegertracing/jaeger@$jaeger_version" >/dev/null
    go mod tidy >/dev/null
    GOFLAGS=-p=1 nice -n 10 go build -o "$jaeger_bin.tmp" github.com/jaegertracing/jaeger/cmd/jaeger
    mv "$jaeger_bin.tmp" "$jaeger_bin"
  )
fi
export KEEL_TEST_JAEGER="$jaeger_bin"
