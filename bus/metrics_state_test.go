package bus_test

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	config "github.com/storybus/storybus/api/config/v1alpha1"
	"github.com/storybus/storybus/bus"
	"github.com/storybus/storybus/internal/storetest"
	"github.com/storybus/storybus/internal/testutil"
)

// hasSeries fails unless the scrape holds the sample line want.
func (h *harness) hasSeries(want string) error {
	got := h.metrics(h.t)
	for line := range strings.SplitSeq(got, "\n") {
		if line == want {
			return nil
		}
	}
	var same []string
	name, _, _ := strings.Cut(want, "{")
	for line := range strings.SplitSeq(got, "\n") {
		if strings.HasPrefix(line, name) {
			same = append(same, line)
		}
	}
	return fmt.Errorf("no %q; %s series: %q", want, name, same)
}

// TestConsumerLagMetric: a durable consumer's backlog is what it has not
// been delivered yet, and what it holds unacknowledged, as JetStream
// counts them.
func TestConsumerLagMetric(t *testing.T) {
	h := newConsumeHarness(t)
	cms := h.token(t, "newsroom", "cms", cmsSecret)
	reader := h.token(t, "newsroom", "reader", readerSecret)
	// The consumer exists before the messages, so that all are its backlog.
	if p, a := h.pull(t, "newsroom", "desk", reader, "max=1"); a.Status != http.StatusOK || len(p.Messages) != 0 {
		t.Fatalf("first pull: %d %d messages", a.Status, len(p.Messages))
	}
	if err := h.hasSeries(`storybus_consumer_pending_messages{connection="reader",consumer="desk",workspace="newsroom"} 0`); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if a := h.post(t, "newsroom", cms, snapshot("", fmt.Sprintf("lag-%d", i), 1, "cms")); a.Status != http.StatusAccepted {
			t.Fatalf("publish: %d %s", a.Status, a.Raw)
		}
	}
	if err := h.hasSeries(`storybus_consumer_pending_messages{connection="reader",consumer="desk",workspace="newsroom"} 3`); err != nil {
		t.Fatal(err)
	}
	got := h.pullUntil(t, "newsroom", "desk", reader, "max=1", 1)
	if err := h.hasSeries(`storybus_consumer_pending_messages{connection="reader",consumer="desk",workspace="newsroom"} 2`); err != nil {
		t.Fatal(err)
	}
	if err := h.hasSeries(`storybus_consumer_ack_pending_messages{connection="reader",consumer="desk",workspace="newsroom"} 1`); err != nil {
		t.Fatal(err)
	}
	if n, a := h.ackIDs(t, "newsroom", "desk", reader, got[0].AckID); n != 1 {
		t.Fatalf("ack: %d %d %s", n, a.Status, a.Raw)
	}
	if err := h.hasSeries(`storybus_consumer_ack_pending_messages{connection="reader",consumer="desk",workspace="newsroom"} 0`); err != nil {
		t.Fatal(err)
	}
	// The other workspace's topic has no consumer: no series for it.
	if strings.Contains(h.metrics(t), `storybus_consumer_pending_messages{connection="reader",consumer="desk",workspace="other"}`) {
		t.Error("a consumer reported on a workspace it is not on")
	}
}

// TestDailyQuotaMetric: a connection with a daily quota reports it and
// today's accepted messages; one without reports neither.
func TestDailyQuotaMetric(t *testing.T) {
	h := newHarness(t)
	cfg := workspaceConfig("newsroom")
	cfg.Connections[0].Limits = &config.Limits{DailyQuota: 5}
	if err := h.srv.Apply(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	if err := h.hasSeries(`storybus_connection_daily_quota_messages{connection="cms",workspace="newsroom"} 5`); err != nil {
		t.Fatal(err)
	}
	if err := h.hasSeries(`storybus_connection_daily_quota_used_messages{connection="cms",workspace="newsroom"} 0`); err != nil {
		t.Fatal(err)
	}
	token := h.token(t, "newsroom", "cms", cmsSecret)
	for i := range 2 {
		if a := h.post(t, "newsroom", token, snapshot("", fmt.Sprintf("quota-%d", i), 1, "cms")); a.Status != http.StatusAccepted {
			t.Fatalf("publish: %d %s", a.Status, a.Raw)
		}
	}
	// A refused message is not counted.
	if a := h.post(t, "newsroom", token, []byte("not json")); a.Status != http.StatusBadRequest {
		t.Fatalf("not JSON: %d", a.Status)
	}
	// The count is written in the background.
	testutil.Eventually(t, "two messages counted", 10*time.Second, func() error {
		return h.hasSeries(`storybus_connection_daily_quota_used_messages{connection="cms",workspace="newsroom"} 2`)
	})
	if m := h.metrics(t); strings.Contains(m, `connection="wire"`) {
		t.Errorf("a connection without a quota is reported:\n%s", m)
	}
}

// TestReadyAndRejectedMetrics: storybus_bus_ready follows Ready, and a
// rejected configuration is reported until one loads.
func TestReadyAndRejectedMetrics(t *testing.T) {
	_, st := storetest.Embedded(t)
	srv := bus.New(bus.Options{Store: st})
	h := &harness{t: t, srv: srv}
	if err := h.hasSeries("storybus_bus_ready 0"); err != nil {
		t.Fatal(err)
	}
	if err := srv.Apply(context.Background(), workspaceConfig("newsroom")); err != nil {
		t.Fatal(err)
	}
	if err := h.hasSeries("storybus_bus_ready 1"); err != nil {
		t.Fatal(err)
	}
	srv.ConfigLoaded("/etc/storybus/newsroom.yaml", "newsroom", errors.New("policy does not compile"))
	if err := h.hasSeries(`storybus_config_rejected{workspace="newsroom"} 1`); err != nil {
		t.Fatal(err)
	}
	srv.ConfigLoaded("/etc/storybus/newsroom.yaml", "newsroom", nil)
	if m := h.metrics(t); strings.Contains(m, "storybus_config_rejected{") {
		t.Errorf("the rejection is still reported after a good load:\n%s", m)
	}
	if err := h.hasSeries(`storybus_config_reloads_total{workspace="newsroom"} 1`); err != nil {
		t.Fatal(err)
	}
}

// TestCertificateExpiryMetric: without TLS there is no certificate
// series; with it, the certificate in use is read at every scrape.
func TestCertificateExpiryMetric(t *testing.T) {
	h := newHarness(t)
	if strings.Contains(h.metrics(t), "storybus_tls_certificate_expiry_timestamp_seconds") {
		t.Fatal("an expiry reported without TLS")
	}
	leaf := &x509.Certificate{NotAfter: time.Unix(1_900_000_000, 0)}
	if err := h.srv.ServeCertificate(func() *x509.Certificate { return leaf }); err != nil {
		t.Fatal(err)
	}
	if err := h.hasSeries("storybus_tls_certificate_expiry_timestamp_seconds 1.9e+09"); err != nil {
		t.Fatal(err)
	}
	leaf = &x509.Certificate{NotAfter: time.Unix(1_950_000_000, 0)}
	if err := h.hasSeries("storybus_tls_certificate_expiry_timestamp_seconds 1.95e+09"); err != nil {
		t.Fatal(err)
	}
}
