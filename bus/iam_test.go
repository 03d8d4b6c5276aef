package bus_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/google/uuid"

	config "github.com/storybus/storybus/api/config/v1alpha1"
	"github.com/storybus/storybus/bus"
	"github.com/storybus/storybus/rules"
)

const (
	cmsAccessKey  = "AKIACMSNEWSROOM00001"
	cmsSecretKey  = "cms-aws-secret-0123456789abcdef0123456789"
	wireAccessKey = "AKIAWIRENEWSROOM0001"
	wireSecretKey = "wire-aws-secret-0123456789abcdef012345678"
	iamRegion     = "eu-west-1"

	signatureMismatch = "The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method. Consult the service documentation for details."
	invalidToken      = "The security token included in the request is invalid."
)

// iamConfig is the newsroom workspace with AWS access keys bound to its
// connections: cms's role is verified, wire's is not.
func iamConfig() *config.Workspace {
	cfg := workspaceConfig("newsroom")
	cfg.Connections[0].IAM = &config.IAM{AccessKeyID: cmsAccessKey, SecretAccessKey: cmsSecretKey,
		RoleARN: "arn:aws:iam::123456789012:role/cms-publisher", Verified: true}
	cfg.Connections[1].IAM = &config.IAM{AccessKeyID: wireAccessKey, SecretAccessKey: wireSecretKey,
		RoleARN: "arn:aws:iam::123456789012:role/wire-publisher"}
	return cfg
}

func newIAMHarness(t *testing.T) *harness {
	t.Helper()
	h := newHarness(t)
	if err := h.srv.Apply(context.Background(), iamConfig()); err != nil {
		t.Fatal(err)
	}
	return h
}

// signed returns a request to the workspace's iam route, signed by the AWS
// SDK's signer as a producer signs it, at the time given.
func (h *harness) signed(t testing.TB, ws, accessKey, secret, service string, body []byte, at time.Time) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, h.http.URL+"/v1/tenants/"+ws+"/iam/messages", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	sum := sha256.Sum256(body)
	creds := aws.Credentials{AccessKeyID: accessKey, SecretAccessKey: secret}
	if err := v4.NewSigner().SignHTTP(context.Background(), creds, req, hex.EncodeToString(sum[:]), service, iamRegion, at); err != nil {
		t.Fatal(err)
	}
	return req
}

// expectAWS fails unless the answer is API Gateway's 403 with the message.
func expectAWS(t *testing.T, a answer, errorType, message string) {
	t.Helper()
	if a.Status != http.StatusForbidden || a.Message != message {
		t.Fatalf("got %d %s, want 403 {\"message\":%q}", a.Status, a.Raw, message)
	}
	if got := a.Header.Get("x-amzn-ErrorType"); got != errorType {
		t.Fatalf("x-amzn-ErrorType %q, want %q", got, errorType)
	}
}

func TestIAMSignedPublishAndDuplicate(t *testing.T) {
	h := newIAMHarness(t)
	body := snapshot("", "iam-story", 1, "cms")
	a := h.do(t, h.signed(t, "newsroom", cmsAccessKey, cmsSecretKey, bus.IAMService, body, h.clock.Now()))
	expect(t, a, http.StatusAccepted, "")
	if a.Family != "story-context" || string(a.Raw["tolerated"]) != "[]" {
		t.Fatalf("202 answer %s", a.Raw)
	}
	// A retry, signed afresh, is the same message: a duplicate.
	d := h.do(t, h.signed(t, "newsroom", cmsAccessKey, cmsSecretKey, bus.IAMService, body, h.clock.Now()))
	expect(t, d, http.StatusOK, "")
	if !d.Duplicate || d.MessageID != a.MessageID {
		t.Fatalf("duplicate answer %s", d.Raw)
	}
	// The same message_id for another message is refused as on /messages.
	other := snapshot(a.MessageID, "iam-story", 2, "cms")
	expect(t, h.do(t, h.signed(t, "newsroom", cmsAccessKey, cmsSecretKey, bus.IAMService, other, h.clock.Now())),
		http.StatusConflict, rules.MessageIDReused)
}

func TestIAMSignatureRefusals(t *testing.T) {
	h := newIAMHarness(t)
	body := snapshot("", "iam-refused", 1, "cms")
	sign := func(key, secret, service string) *http.Request {
		return h.signed(t, "newsroom", key, secret, service, body, h.clock.Now())
	}
	for _, tc := range []struct {
		name      string
		req       func() *http.Request
		errorType string
		message   string
	}{
		{"unsigned", func() *http.Request {
			req := sign(cmsAccessKey, cmsSecretKey, bus.IAMService)
			req.Header.Del("Authorization")
			return req
		}, "MissingAuthenticationTokenException", "Missing Authentication Token"},
		{"wrong secret", func() *http.Request {
			return sign(cmsAccessKey, "not-the-secret-0123456789abcdef0123456789", bus.IAMService)
		}, "InvalidSignatureException", signatureMismatch},
		{"unknown access key", func() *http.Request {
			return sign("AKIAUNKNOWN000000001", cmsSecretKey, bus.IAMService)
		}, "UnrecognizedClientException", invalidToken},
		{"key bound in another workspace", func() *http.Request {
			return h.signed(t, "other", cmsAccessKey, cmsSecretKey, bus.IAMService, body, h.clock.Now())
		}, "UnrecognizedClientException", invalidToken},
		{"body changed after signing", func() *http.Request {
			req := sign(cmsAccessKey, cmsSecretKey, bus.IAMService)
			tampered := bytes.Replace(body, []byte("approved"), []byte("rejected"), 1)
			req.Body = io.NopCloser(bytes.NewReader(tampered))
			return req
		}, "InvalidSignatureException", signatureMismatch},
		{"query added after signing", func() *http.Request {
			req := sign(cmsAccessKey, cmsSecretKey, bus.IAMService)
			req.URL.RawQuery = "debug=1"
			return req
		}, "InvalidSignatureException", signatureMismatch},
		{"signed header changed after signing", func() *http.Request {
			req := sign(cmsAccessKey, cmsSecretKey, bus.IAMService)
			req.Header.Set("Content-Type", "application/vnd.som+json")
			return req
		}, "InvalidSignatureException", signatureMismatch},
		{"signature scoped to another service", func() *http.Request {
			return sign(cmsAccessKey, cmsSecretKey, "s3")
		}, "InvalidSignatureException", "Credential should be scoped to correct service: 'execute-api'. "},
		{"bearer token", func() *http.Request {
			req := sign(cmsAccessKey, cmsSecretKey, bus.IAMService)
			req.Header.Set("Authorization", "Bearer abc.def.ghi")
			return req
		}, "IncompleteSignatureException",
			"'abc.def.ghi' not a valid key=value pair (missing equal-sign) in Authorization header: 'Bearer abc.def.ghi'."},
		{"no X-Amz-Date", func() *http.Request {
			req := sign(cmsAccessKey, cmsSecretKey, bus.IAMService)
			req.Header.Del("X-Amz-Date")
			req.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential="+cmsAccessKey+"/20261129/eu-west-1/execute-api/aws4_request")
			return req
		}, "IncompleteSignatureException",
			"Authorization header requires 'Signature' parameter. Authorization header requires 'SignedHeaders' parameter. " +
				"Authorization header requires existence of either a 'X-Amz-Date' or a 'Date' header. " +
				"Authorization=AWS4-HMAC-SHA256 Credential=" + cmsAccessKey + "/20261129/eu-west-1/execute-api/aws4_request"},
		{"malformed credential", func() *http.Request {
			req := sign(cmsAccessKey, cmsSecretKey, bus.IAMService)
			req.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential=a/b/c, SignedHeaders=host, Signature=00")
			return req
		}, "IncompleteSignatureException",
			"Credential must have exactly 5 slash-delimited elements, e.g. keyid/date/region/service/term, got 'a/b/c'"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			expectAWS(t, h.do(t, tc.req()), tc.errorType, tc.message)
		})
	}

	// Nothing was published.
	cms := h.token(t, "newsroom", "cms", cmsSecret)
	expect(t, h.post(t, "newsroom", cms, body), http.StatusAccepted, "")
}

func TestIAMKeyWithoutSecretAuthenticatesNothing(t *testing.T) {
	h := newHarness(t)
	cfg := iamConfig()
	cfg.Connections[0].IAM.SecretAccessKey = ""
	if err := h.srv.Apply(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	req := h.signed(t, "newsroom", cmsAccessKey, "", bus.IAMService, snapshot("", "s", 1, "cms"), h.clock.Now())
	expectAWS(t, h.do(t, req), "UnrecognizedClientException", invalidToken)
}

func TestIAMSignatureWindow(t *testing.T) {
	h := newIAMHarness(t)
	send := func(at time.Time) answer {
		return h.do(t, h.signed(t, "newsroom", cmsAccessKey, cmsSecretKey, bus.IAMService, snapshot("", uuid.NewString(), 1, "cms"), at))
	}
	const layout = "20060102T150405Z"

	// Within the window either way: accepted.
	expect(t, send(h.clock.Now().Add(-4*time.Minute)), http.StatusAccepted, "")
	expect(t, send(h.clock.Now().Add(4*time.Minute)), http.StatusAccepted, "")

	// Signed, then sent 16 minutes later by the bus's clock: expired.
	signedAt := h.clock.Now().UTC().Truncate(time.Second)
	req := h.signed(t, "newsroom", cmsAccessKey, cmsSecretKey, bus.IAMService, snapshot("", "late", 1, "cms"), signedAt)
	h.clock.Advance(16 * time.Minute)
	a := h.do(t, req)
	expired := regexp.MustCompile(`^Signature expired: (\d{8}T\d{6}Z) is now earlier than (\d{8}T\d{6}Z) \((\d{8}T\d{6}Z) - 5 min\.\)$`)
	m := expired.FindStringSubmatch(a.Message)
	if a.Status != http.StatusForbidden || m == nil || m[1] != signedAt.Format(layout) {
		t.Fatalf("got %d %s", a.Status, a.Raw)
	}
	expectAWS(t, a, "InvalidSignatureException", a.Message)
	earliest, _ := time.Parse(layout, m[2])
	now, _ := time.Parse(layout, m[3])
	if now.Sub(earliest) != 5*time.Minute || now.Sub(signedAt) < 16*time.Minute || now.Sub(signedAt) > 16*time.Minute+time.Minute {
		t.Fatalf("times in %q", a.Message)
	}

	// Dated 6 minutes ahead of the bus's clock: not yet current.
	ahead := h.clock.Now().UTC().Add(6 * time.Minute).Truncate(time.Second)
	a = send(ahead)
	future := regexp.MustCompile(`^Signature not yet current: (\d{8}T\d{6}Z) is still later than (\d{8}T\d{6}Z) \((\d{8}T\d{6}Z) \+ 5 min\.\)$`)
	if m := future.FindStringSubmatch(a.Message); m == nil || m[1] != ahead.Format(layout) {
		t.Fatalf("got %d %s", a.Status, a.Raw)
	}
	expectAWS(t, a, "InvalidSignatureException", a.Message)
}

func TestIAMRoleUnverified(t *testing.T) {
	h := newIAMHarness(t)
	body := snapshot("", "wire-story", 1, "wire")
	// A correct signature by a connection whose role is not verified.
	a := h.do(t, h.signed(t, "newsroom", wireAccessKey, wireSecretKey, bus.IAMService, body, h.clock.Now()))
	expect(t, a, http.StatusForbidden, rules.IAMRoleUnverified)
	if !strings.Contains(a.Violations[0].Message, "wire") {
		t.Fatalf("violation %+v", a.Violations[0])
	}
	// The same connection still publishes with its bearer token.
	wire := h.token(t, "newsroom", "wire", wireSecret)
	expect(t, h.post(t, "newsroom", wire, body), http.StatusAccepted, "")

	// An inactive connection is refused as such on the iam route too.
	cfg := iamConfig()
	cfg.Connections[0].Active = new(bool)
	if err := h.srv.Apply(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	expect(t, h.do(t, h.signed(t, "newsroom", cmsAccessKey, cmsSecretKey, bus.IAMService, snapshot("", "s", 1, "cms"), h.clock.Now())),
		http.StatusForbidden, rules.ConnectionInactive)
}

func TestIAMStageOrder(t *testing.T) {
	h := newIAMHarness(t)
	// Size (stage 2) before the signature (stage 3).
	big := bytes.Repeat([]byte(" "), bus.MaxBodyBytes+1)
	req, _ := http.NewRequest(http.MethodPost, h.http.URL+"/v1/tenants/newsroom/iam/messages", bytes.NewReader(big))
	expect(t, h.do(t, req), http.StatusRequestEntityTooLarge, rules.MessageTooLarge)
	// The signature (stage 3) before parse (stage 7), and a signed body that
	// is not JSON is refused in the refusal shape.
	expect(t, h.do(t, h.signed(t, "newsroom", cmsAccessKey, cmsSecretKey, bus.IAMService, []byte("hello"), h.clock.Now())),
		http.StatusBadRequest, rules.MessageNotJSON)
	// Grants (stage 9) apply to the signing connection.
	expect(t, h.do(t, h.signed(t, "newsroom", cmsAccessKey, cmsSecretKey, bus.IAMService, snapshot("", "s", 1, "wire"), h.clock.Now())),
		http.StatusForbidden, rules.GrantSystemID)
	// A workspace this bus does not serve.
	expectAWS(t, h.do(t, h.signed(t, "unknown", cmsAccessKey, cmsSecretKey, bus.IAMService, []byte("{}"), h.clock.Now())),
		"", bus.MissingAuthenticationToken)
}
