package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// tracingEnabled decides from the standard OpenTelemetry environment
// variables whether the bus exports traces. Tracing is off unless asked
// for: OTEL_TRACES_EXPORTER=otlp, or an OTLP endpoint with no exporter
// named. OTEL_SDK_DISABLED=true and OTEL_TRACES_EXPORTER=none turn it off.
// The OTLP exporter speaks http/protobuf only.
func tracingEnabled(getenv func(string) string) (bool, error) {
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") {
		return false, nil
	}
	on := false
	switch exporter := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); exporter {
	case "none":
		return false, nil
	case "otlp":
		on = true
	case "":
		on = getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
	default:
		return false, usageError{fmt.Errorf("OTEL_TRACES_EXPORTER=%s: the bus exports traces with otlp, or none", exporter)}
	}
	if !on {
		return false, nil
	}
	for _, key := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if p := getenv(key); p != "" && p != "http/protobuf" {
			return false, usageError{fmt.Errorf("%s=%s: the bus's OTLP exporter speaks http/protobuf only", key, p)}
		}
	}
	return true, nil
}

// newTracerProvider returns the tracer provider the OpenTelemetry
// environment variables configure (endpoint, headers, sampler, batching,
// resource), or nil when tracing is off. service.name defaults to
// serviceName; OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES override it.
func newTracerProvider(ctx context.Context, getenv func(string) string, serviceName string) (*sdktrace.TracerProvider, error) {
	on, err := tracingEnabled(getenv)
	if err != nil || !on {
		return nil, err
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", serviceName)),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(),
	)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res)), nil
}

// logTracingErrors sends the OpenTelemetry SDK's errors (a batch of spans
// the collector refused or never received) to log, one structured line
// each, instead of the SDK's default: an unstructured line on standard
// error that breaks a JSON log.
func logTracingErrors(log *slog.Logger) {
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn("tracing failed", "error", err)
	}))
}
