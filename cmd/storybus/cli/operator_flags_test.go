package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
)

// TestNamedLevels: text logs name their levels, logr's verbosities
// included, never DEBUG+3 or a number.
func TestNamedLevels(t *testing.T) {
	var b bytes.Buffer
	log := logr.FromSlogHandler(slog.NewTextHandler(&b, &slog.HandlerOptions{Level: slog.Level(-10), ReplaceAttr: namedLevels}))
	log.Info("info")
	log.V(1).Info("verbose")
	log.V(4).Info("very verbose")
	log.Error(errors.New("boom"), "failed")
	want := []string{"level=INFO msg=info", "level=DEBUG msg=verbose", "level=DEBUG msg=\"very verbose\"", "level=ERROR msg=failed"}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != len(want) {
		t.Fatalf("logged\n%s", b.String())
	}
	for i, w := range want {
		if !strings.Contains(lines[i], w) {
			t.Errorf("line %q lacks %q", lines[i], w)
		}
	}
}

// TestBusResourceFlags: the default requests of bus containers come from
// the flags; empty sets none; a value that is no quantity is a usage error.
func TestBusResourceFlags(t *testing.T) {
	o := OperatorOptions{BusCPURequest: "250m", BusMemoryRequest: ""}
	rr, err := o.busResources()
	if err != nil {
		t.Fatal(err)
	}
	if cpu := rr.Requests[corev1.ResourceCPU]; cpu.String() != "250m" || len(rr.Requests) != 1 || rr.Limits != nil {
		t.Errorf("resources %+v, want a 250m CPU request only", rr)
	}
	o.BusMemoryRequest = "lots"
	var ue usageError
	if _, err := o.busResources(); !errors.As(err, &ue) || !strings.Contains(err.Error(), "--bus-memory-request") {
		t.Errorf("error %v, want a usage error naming --bus-memory-request", err)
	}
}

// TestExposeGatewayFlag: --expose-gateway is namespace/name or name; a
// malformed one is a usage error, as is a --trusted-proxies entry that is
// no CIDR.
func TestExposeGatewayFlag(t *testing.T) {
	for flag, want := range map[string]string{"gateway-system/public": "gateway-system/public", "public": "/public", "": ""} {
		o := OperatorOptions{ExposeGateway: flag}
		ref, err := o.exposeGateway()
		if err != nil {
			t.Fatalf("%q: %v", flag, err)
		}
		got := ""
		if ref != nil {
			got = ref.Namespace + "/" + ref.Name
		}
		if got != want {
			t.Errorf("%q: %q, want %q", flag, got, want)
		}
	}
	var ue usageError
	for _, flag := range []string{"a/b/c", "/public", "gateway-system/", "Public_GW"} {
		o := OperatorOptions{ExposeGateway: flag}
		if _, err := o.exposeGateway(); !errors.As(err, &ue) || !strings.Contains(err.Error(), "--expose-gateway") {
			t.Errorf("%q: %v, want a usage error naming --expose-gateway", flag, err)
		}
	}
	o := OperatorOptions{TrustedProxies: []string{"10.42.0.0/16", "proxy.example"}, MaxConcurrentReconciles: 1, LogFormat: "json", LogLevel: "info"}
	if err := o.validate(); !errors.As(err, &ue) || !strings.Contains(err.Error(), "--trusted-proxies") {
		t.Errorf("validate: %v, want a usage error naming --trusted-proxies", err)
	}
}

// TestPodMonitorFlags: --pod-monitor-interval is a Prometheus duration
// and --pod-monitor-labels are valid labels; anything else is a usage
// error naming the flag.
// TestBusEnvFlag: --bus-env takes OTEL_NAME=VALUE, commas and '=' in the
// value included, and refuses every other variable.
func TestBusEnvFlag(t *testing.T) {
	o := OperatorOptions{BusEnv: []string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://collector:4318", "OTEL_RESOURCE_ATTRIBUTES=team=news,env=prod"}}
	env, err := o.busEnv()
	if err != nil || len(env) != 2 || env[1].Name != "OTEL_RESOURCE_ATTRIBUTES" || env[1].Value != "team=news,env=prod" {
		t.Fatalf("%+v %v", env, err)
	}
	var ue usageError
	for _, flag := range []string{"GODEBUG=x509sha1=1", "OTEL_EXPORTER_OTLP_ENDPOINT", "=x"} {
		o := OperatorOptions{BusEnv: []string{flag}}
		if _, err := o.busEnv(); !errors.As(err, &ue) || !strings.Contains(err.Error(), "--bus-env") {
			t.Errorf("%q: %v, want a usage error naming --bus-env", flag, err)
		}
	}
}

func TestPodMonitorFlags(t *testing.T) {
	valid := OperatorOptions{MaxConcurrentReconciles: 1, LogFormat: "json", LogLevel: "info",
		PodMonitorInterval: "1m30s", PodMonitorLabels: map[string]string{"release": "kube-prometheus-stack"}}
	if err := valid.validate(); err != nil {
		t.Fatal(err)
	}
	var ue usageError
	for flag, o := range map[string]OperatorOptions{
		"--pod-monitor-interval": {PodMonitorInterval: "30 seconds"},
		"--pod-monitor-labels":   {PodMonitorLabels: map[string]string{"release": "not a label value"}},
	} {
		o.MaxConcurrentReconciles, o.LogFormat, o.LogLevel = 1, "json", "info"
		if err := o.validate(); !errors.As(err, &ue) || !strings.Contains(err.Error(), flag) {
			t.Errorf("validate: %v, want a usage error naming %s", err, flag)
		}
	}
}

// TestQuietStop: an error caused by the stop is INFO once the stop began,
// and stays an ERROR before it; other errors stay ERRORs.
func TestQuietStop(t *testing.T) {
	var b bytes.Buffer
	stopping := make(chan struct{})
	log := logr.FromSlogHandler(quietStop{Handler: slog.NewTextHandler(&b, &slog.HandlerOptions{ReplaceAttr: namedLevels}), stopping: stopping})
	cancelled := fmt.Errorf("patch event: %w", context.Canceled)
	log.Error(cancelled, "before")
	close(stopping)
	log.WithValues("controller", "tenant").Error(cancelled, "after")
	log.Error(errors.New("forbidden"), "real")
	want := []string{"level=ERROR msg=before", "level=INFO msg=after", "level=ERROR msg=real"}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != len(want) {
		t.Fatalf("logged\n%s", b.String())
	}
	for i, w := range want {
		if !strings.Contains(lines[i], w) {
			t.Errorf("line %q lacks %q", lines[i], w)
		}
	}
}

// countingHandler counts the attribute sets its handler was derived with.
type countingHandler struct {
	slog.Handler
	derived *int
}

func (c countingHandler) WithAttrs(as []slog.Attr) slog.Handler {
	*c.derived++
	return countingHandler{c.Handler.WithAttrs(as), c.derived}
}

func (c countingHandler) WithGroup(name string) slog.Handler {
	return countingHandler{c.Handler.WithGroup(name), c.derived}
}

// TestQuietStopDerivesOnWrite: a logger derived with attributes that
// writes nothing costs its handler nothing (controller-runtime derives one
// per reconcile); one that writes has every attribute of its own line, in
// order and in its groups, and none of a sibling's.
func TestQuietStopDerivesOnWrite(t *testing.T) {
	var b bytes.Buffer
	derived := 0
	base := slog.New(quietStop{Handler: countingHandler{slog.NewTextHandler(&b, nil), &derived}, stopping: make(chan struct{})})
	parent := base.With("controller", "tenant")
	for i := range 100 {
		parent.With("reconcileID", i)
	}
	if derived != 0 {
		t.Fatalf("%d handlers derived for loggers that wrote nothing, want 0", derived)
	}
	first, second := parent.With("name", "t1"), parent.With("name", "t2")
	first.WithGroup("step").With("phase", "compile").Info("one")
	second.Info("two")
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	want := []string{"msg=one controller=tenant name=t1 step.phase=compile", "msg=two controller=tenant name=t2"}
	if len(lines) != len(want) {
		t.Fatalf("logged\n%s", b.String())
	}
	for i, w := range want {
		if !strings.HasSuffix(lines[i], w) {
			t.Errorf("line %q does not end %q", lines[i], w)
		}
	}
}

// TestOperatorMemoryLimitFlag: a --memory-limit that is no quantity stops
// the operator before it connects, as a usage error naming the flag.
func TestOperatorMemoryLimitFlag(t *testing.T) {
	t.Setenv("GOMEMLIMIT", "")
	err := RunOperator(t.Context(), OperatorOptions{MemoryLimit: "lots"}, &rest.Config{Host: "https://127.0.0.1:1"}, logr.Discard())
	var ue usageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "--memory-limit") {
		t.Errorf("error %v, want a usage error naming --memory-limit", err)
	}
}

// TestOperatorAPICompressionFlag: the operator asks the API server for
// uncompressed answers unless --api-compression says otherwise (the
// request's Accept-Encoding, as the API server sees it: over TLS, as an
// API server always speaks).
func TestOperatorAPICompressionFlag(t *testing.T) {
	for _, compress := range []bool{false, true} {
		t.Run(fmt.Sprintf("api-compression=%v", compress), func(t *testing.T) {
			encodings := make(chan string, 1)
			srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				select {
				case encodings <- r.Header.Get("Accept-Encoding"):
				default:
				}
				http.Error(w, "not an API server", http.StatusServiceUnavailable)
			}))
			defer srv.Close()
			o := OperatorOptions{APICompression: compress, MetricsBindAddress: "0", HealthProbeBindAddress: "0"}
			if err := RunOperator(t.Context(), o, &rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}}, logr.Discard()); err == nil {
				t.Fatal("the operator ran against a server that answers nothing but 503")
			}
			var got string
			select {
			case got = <-encodings:
			default:
				t.Fatal("the operator sent the API server no request")
			}
			if gzip := strings.Contains(got, "gzip"); gzip != compress {
				t.Errorf("Accept-Encoding %q with --api-compression=%v", got, compress)
			}
		})
	}
}
