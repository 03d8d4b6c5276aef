package controllers

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/storybus/storybus/api/v1alpha1"
	"github.com/storybus/storybus/internal/buildinfo"
)

// testLogs holds every log line of the suite's manager, as JSON.
var testLogs logBuffer

type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// errorsAbout returns the ERROR lines logged so far that mention name.
func (b *logBuffer) errorsAbout(name string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(b.buf.Bytes()))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var line struct{ Level string }
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.Level == "ERROR" && strings.Contains(sc.Text(), name) {
			out = append(out, sc.Text())
		}
	}
	return out
}

// TestOperatorMetrics reads the operator's own metrics from
// controller-runtime's registry after reconciles: Tenants by condition,
// and the generation whose configuration is written.
func TestOperatorMetrics(t *testing.T) {
	ns := newNamespace(t)
	create(t, newTenant(ns, "measured"))
	tn := &v1alpha1.Tenant{}
	waitCondition(t, ns, "measured", tn, tenantGen, v1alpha1.ConditionConfigurationValid, metav1.ConditionTrue, v1alpha1.ReasonCompiled)
	update(t, ns, "measured", &v1alpha1.Tenant{}, func(tn *v1alpha1.Tenant) { tn.Spec.TokenTTL = &metav1.Duration{Duration: 2 * time.Minute} })
	eventually(t, "configuration generation metric", func() error {
		if err := get(ns, "measured", tn); err != nil {
			return err
		}
		got := testutil.ToFloat64(configurationGeneration.WithLabelValues(ns, "measured"))
		if got != float64(tn.Generation) || tn.Generation < 2 {
			return fmt.Errorf("storybus_operator_tenant_configuration_generation %v, Tenant generation %d", got, tn.Generation)
		}
		return nil
	})
	eventually(t, "tenants by condition", func() error {
		n, err := gauge("storybus_operator_tenants", map[string]string{"condition": "ConfigurationValid", "status": "True", "reason": "Compiled"})
		if err != nil || n < 1 {
			return fmt.Errorf("storybus_operator_tenants{condition=ConfigurationValid,status=True} = %v, %v", n, err)
		}
		return nil
	})

	// A deleted Tenant leaves no series behind.
	if err := k8s.Delete(context.Background(), tn); err != nil {
		t.Fatal(err)
	}
	eventually(t, "Tenant gone", func() error { return gone(ns, "measured", &v1alpha1.Tenant{}) })
	eventually(t, "its metrics gone", func() error {
		if n, err := gauge("storybus_operator_tenant_configuration_generation", map[string]string{"namespace": ns, "tenant": "measured"}); err == nil {
			return fmt.Errorf("the deleted Tenant's configuration generation is still %v", n)
		}
		return nil
	})
}

// TestBuildInfoMetric: the operator's registry holds storybus_build_info,
// 1, labelled with the binary's build.
func TestBuildInfoMetric(t *testing.T) {
	b := buildinfo.Get()
	n, err := gauge("storybus_build_info", map[string]string{"version": b.Version, "commit": b.Commit, "goversion": b.GoVersion})
	if err != nil || n != 1 {
		t.Fatalf("storybus_build_info%+v = %v, %v; want 1", b, n, err)
	}
}

// counter is the value of the counter of name with labels in the
// registry.
func counter(name string, labels map[string]string) (float64, error) {
	_, c, err := series(name, labels)
	return c, err
}

// gauge is the value of the series of name with labels in the registry.
func gauge(name string, labels map[string]string) (float64, error) {
	g, _, err := series(name, labels)
	return g, err
}

// series is the value of the series of name with labels in the registry,
// as a gauge and as a counter.
func series(name string, labels map[string]string) (gauge, counter float64, err error) {
	mfs, err := metrics.Registry.Gather()
	if err != nil {
		return 0, 0, err
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if want, ok := labels[lp.GetName()]; ok && want != lp.GetValue() {
					continue next
				}
			}
			return m.GetGauge().GetValue(), m.GetCounter().GetValue(), nil
		}
	}
	return 0, 0, fmt.Errorf("no series %s%v", name, labels)
}

// TestReconcileErrorsCounted: a failed reconcile counts by kind and the
// API server's reason; a spec the user must fix is no reconcile error.
func TestReconcileErrorsCounted(t *testing.T) {
	fail := func(err error) observed {
		return observed{kind: "Test", inner: reconcile.Func(func(context.Context, ctrl.Request) (ctrl.Result, error) { return ctrl.Result{}, err })}
	}
	conflict := apierrors.NewConflict(schema.GroupResource{Resource: "tenants"}, "x", errors.New("changed"))
	before := testutil.ToFloat64(reconcileErrors.WithLabelValues("Test", "Conflict"))
	if _, err := fail(fmt.Errorf("patch: %w", conflict)).Reconcile(context.Background(), ctrl.Request{}); !apierrors.IsConflict(err) {
		t.Errorf("error %v, want the conflict returned", err)
	}
	if got := testutil.ToFloat64(reconcileErrors.WithLabelValues("Test", "Conflict")); got != before+1 {
		t.Errorf("Conflict errors %v, want %v", got, before+1)
	}
	unknown := testutil.ToFloat64(reconcileErrors.WithLabelValues("Test", "Unknown"))
	// controller-runtime counts a spec to fix among its terminal errors
	// (controller_runtime_terminal_reconcile_errors_total) and does not
	// retry it: it must see the error.
	if _, err := fail(reconcile.TerminalError(errors.New("bad spec"))).Reconcile(context.Background(), ctrl.Request{}); !errors.Is(err, reconcile.TerminalError(nil)) {
		t.Errorf("a spec to fix returned %v, want the terminal error", err)
	}
	if got := testutil.ToFloat64(reconcileErrors.WithLabelValues("Test", "Unknown")); got != unknown {
		t.Errorf("a spec to fix counted as an error")
	}
	// Shutting down cancels the reconciles in flight: no error either.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := fail(fmt.Errorf("apply service: %w", context.Canceled)).Reconcile(ctx, ctrl.Request{}); err != nil {
		t.Errorf("a reconcile cut short by shutdown returned %v, want nil", err)
	}
	if got := testutil.ToFloat64(reconcileErrors.WithLabelValues("Test", "Unknown")); got != unknown {
		t.Errorf("a reconcile cut short by shutdown counted as an error")
	}
}

// TestUserMistakesAreNotErrors: a dangling tenantRef and an invalid
// configuration are Warnings in status and Events, never an ERROR log;
// controller-runtime counts the invalid configuration as a terminal error.
func TestUserMistakesAreNotErrors(t *testing.T) {
	terminalBefore, _ := counter("controller_runtime_terminal_reconcile_errors_total", map[string]string{"controller": "tenant-configuration"})
	ns := newNamespace(t)
	create(t, newConnection(ns, "orphan-conn", "no-such-tenant"))
	create(t, newTenant(ns, "badly-configured", func(tn *v1alpha1.Tenant) {
		tn.Spec.Firewall = &v1alpha1.Firewall{BlockedPatterns: []string{"(unclosed"}}
	}))
	c := &v1alpha1.Connection{}
	waitCondition(t, ns, "orphan-conn", c, connectionGen, v1alpha1.ConditionResolvedRefs, metav1.ConditionFalse, v1alpha1.ReasonTenantNotFound)
	tn := &v1alpha1.Tenant{}
	waitCondition(t, ns, "badly-configured", tn, tenantGen, v1alpha1.ConditionConfigurationValid, metav1.ConditionFalse, v1alpha1.ReasonInvalidConfiguration)
	waitEvent(t, ns, "Connection", "orphan-conn", v1alpha1.ReasonTenantNotFound)
	waitEvent(t, ns, "Tenant", "badly-configured", v1alpha1.ReasonInvalidConfiguration)
	// Reconciles go on (a Connection's Tenant appears later); give the
	// operator's later reconciles of both the chance to log.
	update(t, ns, "badly-configured", &v1alpha1.Tenant{}, func(tn *v1alpha1.Tenant) { tn.Labels = map[string]string{"touched": "yes"} })
	update(t, ns, "orphan-conn", &v1alpha1.Connection{}, func(c *v1alpha1.Connection) { c.Labels = map[string]string{"touched": "yes"} })
	waitEvent(t, ns, "Tenant", "badly-configured", v1alpha1.ReasonInvalidConfiguration)
	for _, name := range []string{"orphan-conn", "badly-configured"} {
		if lines := testLogs.errorsAbout(name); len(lines) > 0 {
			t.Errorf("ERROR logged for %s:\n%s", name, strings.Join(lines, "\n"))
		}
	}
	if n, err := counter("controller_runtime_terminal_reconcile_errors_total", map[string]string{"controller": "tenant-configuration"}); err != nil || n <= terminalBefore {
		t.Errorf("terminal reconcile errors of tenant-configuration: %v (%v), were %v: the invalid configuration did not reach controller-runtime", n, err, terminalBefore)
	}
	// One Event per reason: Ready repeats InvalidConfiguration and adds
	// nothing.
	var l eventsv1.EventList
	if err := k8s.List(context.Background(), &l, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, e := range l.Items {
		if e.Regarding.Name == "badly-configured" {
			seen[e.Reason]++
		}
	}
	if seen[v1alpha1.ReasonInvalidConfiguration] != 1 {
		t.Errorf("events by reason %v, want one InvalidConfiguration", seen)
	}
}
