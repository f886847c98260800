package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/keel-run/keel/telemetry"
)

// Telemetry is the [telemetry] table of config.toml. The standard
// OpenTelemetry environment variables override it:
//
//	[telemetry]
//	endpoint = "http://127.0.0.1:4318"   # OTEL_EXPORTER_OTLP_ENDPOINT
//	protocol = "http/protobuf"           # or "grpc"; OTEL_EXPORTER_OTLP_PROTOCOL
//	service_name = "keel"                # OTEL_SERVICE_NAME
//	headers = { "x-api-key" = "..." }    # OTEL_EXPORTER_OTLP_HEADERS
//	content = false                      # prompt and completion text in spans (redacted)
type Telemetry struct {
	Endpoint    string            `toml:"endpoint"`
	Protocol    string            `toml:"protocol"`
	ServiceName string            `toml:"service_name"`
	Headers     map[string]string `toml:"headers"`
	Content     bool              `toml:"content"`
}

// TelemetryConfig returns the trace export settings of c and the
// environment. Tracing is off unless an endpoint is set:
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (the full URL), else
// OTEL_EXPORTER_OTLP_ENDPOINT or endpoint in config.toml (a base URL:
// "/v1/traces" is appended for http/protobuf). OTEL_SDK_DISABLED=true or
// OTEL_TRACES_EXPORTER=none turn it off.
func (c *Config) TelemetryConfig(getenv func(string) string) (*telemetry.Config, error) {
	t := c.Telemetry
	out := &telemetry.Config{Protocol: t.Protocol, ServiceName: t.ServiceName, Headers: map[string]string{}, Content: t.Content}
	for k, v := range t.Headers {
		out.Headers[k] = v
	}
	if v := first(getenv, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"); v != "" {
		out.Protocol = v
	}
	if out.Protocol == "" {
		out.Protocol = telemetry.ProtocolHTTP
	}
	if v := getenv("OTEL_SERVICE_NAME"); v != "" {
		out.ServiceName = v
	}
	for _, name := range []string{"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"} {
		if v := getenv(name); v != "" {
			h, err := telemetry.ParseHeaders(v)
			if err != nil {
				return nil, fmt.Errorf("config: %s: %w", name, err)
			}
			for k, v := range h {
				out.Headers[k] = v
			}
		}
	}
	if v := getenv("OTEL_RESOURCE_ATTRIBUTES"); v != "" {
		r, err := telemetry.ParseHeaders(v)
		if err != nil {
			return nil, fmt.Errorf("config: OTEL_RESOURCE_ATTRIBUTES: %w", err)
		}
		out.Resource = r
	}
	if v := first(getenv, "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT"); v != "" {
		ms, err := strconv.Atoi(v)
		if err != nil || ms < 0 {
			return nil, fmt.Errorf("config: OTEL_EXPORTER_OTLP_TIMEOUT %q: want milliseconds", v)
		}
		out.Timeout = time.Duration(ms) * time.Millisecond
	}
	if v := getenv("KEEL_TELEMETRY_CONTENT"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return nil, fmt.Errorf("config: KEEL_TELEMETRY_CONTENT %q: want true or false", v)
		}
		out.Content = b
	}
	switch {
	case getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "":
		out.Endpoint = getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
	case getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "":
		out.Endpoint = TracesURL(getenv("OTEL_EXPORTER_OTLP_ENDPOINT"), out.Protocol)
	case t.Endpoint != "":
		out.Endpoint = TracesURL(t.Endpoint, out.Protocol)
	}
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") || getenv("OTEL_TRACES_EXPORTER") == "none" {
		out.Endpoint = ""
	}
	if err := out.Validate(); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return out, nil
}

// TracesURL turns an OTLP base URL into the traces endpoint: for
// http/protobuf it appends "/v1/traces" (as OTEL_EXPORTER_OTLP_ENDPOINT
// is specified); grpc takes the URL as it is.
func TracesURL(base, protocol string) string {
	if protocol == telemetry.ProtocolGRPC || base == "" {
		return base
	}
	return strings.TrimRight(base, "/") + "/v1/traces"
}

func first(getenv func(string) string, names ...string) string {
	for _, n := range names {
		if v := getenv(n); v != "" {
			return v
		}
	}
	return ""
}
