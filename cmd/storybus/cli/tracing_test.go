package cli

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"

	"github.com/storybus/storybus/internal/testutil"
)

func TestTracingIsOffUnlessTheEnvironmentAsks(t *testing.T) {
	for _, tc := range []struct {
		name  string
		env   map[string]string
		on    bool
		usage string
	}{
		{"nothing set", nil, false, ""},
		{"an endpoint", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, true, ""},
		{"a traces endpoint", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, true, ""},
		{"otlp named", map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, true, ""},
		{"none", map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, false, ""},
		{"the SDK disabled", map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, false, ""},
		{"another exporter", map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, false, "OTEL_TRACES_EXPORTER"},
		{"grpc", map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, false, "OTEL_EXPORTER_OTLP_PROTOCOL"},
		{"http/protobuf", map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			on, err := tracingEnabled(func(k string) string { return tc.env[k] })
			var ue usageError
			switch {
			case tc.usage != "" && (!errors.As(err, &ue) || !strings.Contains(err.Error(), tc.usage)):
				t.Fatalf("error %v, want a usage error naming %s", err, tc.usage)
			case tc.usage == "" && err != nil:
				t.Fatal(err)
			case on != tc.on:
				t.Fatalf("tracing on %v, want %v", on, tc.on)
			}
		})
	}
}

// TestServeExportsTracesOverOTLP runs the bus with an OTLP endpoint in its
// environment and publishes with a producer's traceparent: the spans reach
// the collector, in the producer's trace, under the configured service.
func TestServeExportsTracesOverOTLP(t *testing.T) {
	var mu sync.Mutex
	var exported [][]byte
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.Method == http.MethodPost && r.URL.Path == "/v1/traces" {
			mu.Lock()
			exported = append(exported, body)
			mu.Unlock()
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(collector.Close)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
	t.Setenv("OTEL_SERVICE_NAME", "newsroom-bus")

	b := serveTLS(t, nil)
	hc := b.client(false)
	token, _ := b.token(t, hc)
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	req, _ := http.NewRequest(http.MethodPost, b.url("/messages"), strings.NewReader(snapshotJSON("", "traced-story", 1)))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
	res, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusAccepted {
		t.Fatalf("publish answered %d", res.StatusCode)
	}
	// OTLP/protobuf carries trace ids as raw bytes.
	raw, _ := hex.DecodeString(traceID)
	testutil.Eventually(t, "the publish's spans at the collector", 20*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		for _, body := range exported {
			if bytes.Contains(body, raw) && bytes.Contains(body, []byte("newsroom-bus")) && bytes.Contains(body, []byte("POST /v1/tenants/:tenant/messages")) {
				return nil
			}
		}
		return fmt.Errorf("%d exports, none with the producer's trace", len(exported))
	})
}

// TestTracingErrorsAreLogLines: an export the collector never received is
// reported by the SDK through the global error handler, which by default
// writes an unstructured line that a JSON log's reader cannot parse.
func TestTracingErrorsAreLogLines(t *testing.T) {
	previous := otel.GetErrorHandler()
	t.Cleanup(func() { otel.SetErrorHandler(previous) })
	var buf bytes.Buffer
	logTracingErrors(slog.New(slog.NewJSONHandler(&buf, nil)))
	otel.Handle(errors.New("traces export: connection refused"))
	var line struct{ Level, Msg, Error string }
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatalf("not one JSON log line: %q: %v", buf.String(), err)
	}
	if line.Level != "WARN" || line.Msg != "tracing failed" || line.Error != "traces export: connection refused" {
		t.Errorf("logged %+v, want a warning \"tracing failed\" with the error", line)
	}
}
