package bus_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/storybus/storybus/bus"
	"github.com/storybus/storybus/internal/openapitest"
	"github.com/storybus/storybus/internal/storetest"
	"github.com/storybus/storybus/internal/testutil"
	"github.com/storybus/storybus/rules"
)

// logBuffer collects JSON log lines written concurrently.
type logBuffer struct{ testutil.SyncBuffer }

// lines returns the decoded log lines whose msg is msg.
func (b *logBuffer) lines(t *testing.T, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(b.String()))
	for sc.Scan() {
		var line map[string]any
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("log line %q: %v", sc.Text(), err)
		}
		if line["msg"] == msg {
			out = append(out, line)
		}
	}
	return out
}

// loggedHarness is a harness whose bus logs, and writes its access log,
// as JSON into logs; access false leaves the access log off.
func loggedHarness(t *testing.T, access bool, o bus.Options) (*harness, *logBuffer) {
	t.Helper()
	logs := &logBuffer{}
	ns, st := storetest.Embedded(t)
	log := slog.New(slog.NewJSONHandler(logs, nil))
	o.Store, o.Logger = st, log
	if access {
		o.AccessLog = log
	}
	h := &harness{t: t, ns: ns, clock: &fakeClock{}, srv: bus.New(o)}
	if err := h.srv.Apply(context.Background(), workspaceConfig("newsroom")); err != nil {
		t.Fatal(err)
	}
	h.http, h.api = openapitest.Serve(t, openapitest.PublishPort, h.srv.Handler())
	return h, logs
}

func TestRequestIDIsTheProducersOrMadeByTheBus(t *testing.T) {
	h := newHarness(t)
	tok := h.token(t, "newsroom", "cms", cmsSecret)
	for _, tc := range []struct {
		name string
		sent []string
		kept bool
	}{
		{"none", nil, false},
		{"well-formed", []string{"cms-7f3a:2026-12-01/42"}, true},
		{"128 characters", []string{strings.Repeat("a", 128)}, true},
		{"129 characters", []string{strings.Repeat("a", 129)}, false},
		{"empty", []string{""}, false},
		{"a space", []string{"cms 42"}, false},
		{"a comma", []string{"a,b"}, false},
		{"not ASCII", []string{"réf-42"}, false},
		{"two headers", []string{"a", "b"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, h.http.URL+"/v1/tenants/newsroom/messages", bytes.NewReader(snapshot("", uuid.NewString(), 1, "cms")))
			req.Header.Set("Authorization", "Bearer "+tok)
			for _, id := range tc.sent {
				req.Header.Add(bus.RequestIDHeader, id)
			}
			a := h.do(t, req)
			got := a.Header.Get(bus.RequestIDHeader)
			switch {
			case tc.kept && got != tc.sent[0]:
				t.Fatalf("sent %q, answered %q", tc.sent[0], got)
			case !tc.kept && (len(got) != 32 || strings.Trim(got, "0123456789abcdef") != ""):
				t.Fatalf("sent %q, answered %q: want a generated id", tc.sent, got)
			}
		})
	}
	// Control characters never reach the bus through Go's client.
	for _, id := range []string{"a\x7fb", "a\tb", "a\x00"} {
		if bus.ValidRequestID(id) {
			t.Fatalf("%q kept as a request id", id)
		}
	}
	// Every route answers with one, the unknown ones too.
	first := ""
	for range 2 {
		res, err := http.Get(h.http.URL + "/nowhere")
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		id := res.Header.Get(bus.RequestIDHeader)
		if id == "" || id == first {
			t.Fatalf("unknown path answered X-Request-Id %q (previous %q)", id, first)
		}
		first = id
	}
}

func TestUnavailableAnswerAndLogsCarryTheRequestID(t *testing.T) {
	h, logs := loggedHarness(t, true, bus.Options{})
	tok := h.token(t, "newsroom", "cms", cmsSecret)
	h.ns.Shutdown()
	h.ns.WaitForShutdown()
	req, _ := http.NewRequest(http.MethodPost, h.http.URL+"/v1/tenants/newsroom/messages", bytes.NewReader(snapshot("", "s", 1, "cms")))
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set(bus.RequestIDHeader, "cms-req-503")
	a := h.do(t, req) // checkShape: request_id in the body is the header's
	expect(t, a, http.StatusServiceUnavailable, rules.RegistryUnavailable)
	if string(a.Raw["request_id"]) != `"cms-req-503"` {
		t.Fatalf("request_id %s", a.Raw["request_id"])
	}
	failures := logs.lines(t, "record store unavailable")
	if len(failures) == 0 || failures[0]["requestID"] != "cms-req-503" {
		t.Fatalf("the store failure's log lines %v lack the request id; logs:\n%s", failures, logs)
	}
	access := logs.lines(t, "request")
	last := access[len(access)-1]
	if last["requestID"] != "cms-req-503" || last["status"] != "503" || last["rule"] != rules.RegistryUnavailable {
		t.Fatalf("access log line %v", last)
	}
}

func TestAccessLogNamesTheRequestAndNothingSecret(t *testing.T) {
	h, logs := loggedHarness(t, true, bus.Options{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
	tok := h.token(t, "newsroom", "cms", cmsSecret)
	id := uuid.NewString()
	body := snapshot(id, "harbour-bridge", 1, "cms")
	req, _ := http.NewRequest(http.MethodPost, h.http.URL+"/v1/tenants/newsroom/messages", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("X-Forwarded-For", "203.0.113.7")
	req.Header.Set(bus.RequestIDHeader, "cms-req-1")
	expect(t, h.do(t, req), http.StatusAccepted, "")
	// A refusal after authentication: wire may not publish for cms.
	wire := h.token(t, "newsroom", "wire", wireSecret)
	expect(t, h.post(t, "newsroom", wire, snapshot("", "harbour-bridge", 2, "cms")), http.StatusForbidden, rules.GrantSystemID)
	// A token request with a wrong secret, and a bearer token on a path
	// the API lacks.
	h.tokenForm(t, "newsroom", "grant_type=client_credentials", "cms", "not-the-secret-0123456789")
	lost, _ := http.NewRequest(http.MethodGet, h.http.URL+"/v1/tenants/newsroom/elsewhere?token=query-secret-42", nil)
	lost.Header.Set("Authorization", "Bearer "+tok)
	h.do(t, lost)

	lines := logs.lines(t, "request")
	if len(lines) != 6 {
		t.Fatalf("%d access log lines, want 6 (two tokens, two publishes, a failed token, an unknown path):\n%s", len(lines), logs)
	}
	want := map[string]any{
		"requestID": "cms-req-1", "workspace": "newsroom", "connection": "cms", "route": "publish",
		"status": "202", "rule": "", "messageID": id, "storyID": "harbour-bridge", "clientAddress": "203.0.113.7",
	}
	got := lines[1]
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("access log %s = %v, want %v: %v", k, got[k], v, got)
		}
	}
	if ms, ok := got["latencyMs"].(float64); !ok || ms <= 0 {
		t.Fatalf("latencyMs %v", got["latencyMs"])
	}
	if got := lines[3]; got["connection"] != "wire" || got["status"] != "403" || got["rule"] != rules.GrantSystemID || got["storyID"] != "harbour-bridge" {
		t.Fatalf("refused publish logged as %v", got)
	}
	if got := lines[4]; got["route"] != "tokens" || got["status"] != "401" || got["connection"] != "" {
		t.Fatalf("failed token request logged as %v", got)
	}
	if got := lines[5]; got["route"] != "unknown" || got["status"] != "403" || got["rule"] != "route" {
		t.Fatalf("unknown path logged as %v", got)
	}
	all := logs.String()
	for _, secret := range []string{cmsSecret, wireSecret, "not-the-secret-0123456789", tok, wire, "query-secret-42", "Harbour bridge approved", "Bearer", "Basic"} {
		if strings.Contains(all, secret) {
			t.Fatalf("the logs hold %q:\n%s", secret, all)
		}
	}
}

func TestAccessLogCanBeTurnedOff(t *testing.T) {
	h, logs := loggedHarness(t, false, bus.Options{})
	tok := h.token(t, "newsroom", "cms", cmsSecret)
	expect(t, h.post(t, "newsroom", tok, snapshot("", "s", 1, "cms")), http.StatusAccepted, "")
	if lines := logs.lines(t, "request"); len(lines) != 0 {
		t.Fatalf("access log off, yet %d lines", len(lines))
	}
}
