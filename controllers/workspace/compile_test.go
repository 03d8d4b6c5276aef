package workspace

import (
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	config "github.com/storybus/storybus/api/config/v1alpha1"
	"github.com/storybus/storybus/api/v1alpha1"
)

const ns = "news"

var signingKey = []byte("0123456789abcdef0123456789abcdef")

func tenant(name string, mod ...func(*v1alpha1.Tenant)) *v1alpha1.Tenant {
	t := &v1alpha1.Tenant{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
	for _, m := range mod {
		m(t)
	}
	return t
}

func conn(name, tenant string, mod ...func(*v1alpha1.Connection)) v1alpha1.Connection {
	c := v1alpha1.Connection{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       v1alpha1.ConnectionSpec{TenantRef: v1alpha1.LocalObjectReference{Name: tenant}},
	}
	for _, m := range mod {
		m(&c)
	}
	return c
}

func grant(name, conn string, pub *v1alpha1.PublishGrant, con *v1alpha1.ConsumeGrant) v1alpha1.Grant {
	return v1alpha1.Grant{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       v1alpha1.GrantSpec{ConnectionRef: v1alpha1.LocalObjectReference{Name: conn}, Publish: pub, Consume: con},
	}
}

func ownershipPolicy(name, tenant, notOwner string, owners []v1alpha1.OwnerRule, handoffs []v1alpha1.Handoff) v1alpha1.OwnershipPolicy {
	return v1alpha1.OwnershipPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: v1alpha1.OwnershipPolicySpec{TenantRef: v1alpha1.LocalObjectReference{Name: tenant},
			NotOwner: notOwner, Owners: owners, Handoffs: handoffs},
	}
}

// withModule adds a workspace Rego module declaring one warning rule.
func withModule(name, rego string) func(*v1alpha1.Tenant) {
	return func(t *v1alpha1.Tenant) {
		t.Spec.Policies = append(t.Spec.Policies, v1alpha1.PolicyModule{Name: name, Rego: rego,
			Rules: []v1alpha1.TenantRule{{ID: "tenant.long"}}})
	}
}

func secret(name, clientID, clientSecret string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Data:       map[string][]byte{v1alpha1.CredentialsClientIDKey: []byte(clientID), v1alpha1.CredentialsClientSecretKey: []byte(clientSecret)},
	}
}

func TestCompile(t *testing.T) {
	rotated := metav1.NewTime(time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC))
	tests := []struct {
		name    string
		in      Input
		check   func(t *testing.T, w *config.Workspace)
		wantErr string
	}{{
		name: "defaults: workspace id is the tenant's name, 168h, 1h, tolerate, no connections",
		in:   Input{Tenant: tenant("newsroom")},
		check: func(t *testing.T, w *config.Workspace) {
			if w.ID != "newsroom" || w.IdempotencyWindow.Duration != 168*time.Hour || w.TokenTTL.Duration != time.Hour ||
				w.Ownership.NotOwner != config.NotOwnerTolerate || len(w.Connections) != 0 || w.SigningKeyFile != "/keys/signingKey" || w.SigningKey != "" {
				t.Errorf("got %+v", w)
			}
		},
	}, {
		name: "tenant settings are carried over",
		in: Input{Tenant: tenant("newsroom", func(t *v1alpha1.Tenant) {
			t.Spec.WorkspaceID = "ws-1"
			t.Spec.IdempotencyWindow = &metav1.Duration{Duration: 240 * time.Hour}
			t.Spec.TokenTTL = &metav1.Duration{Duration: 30 * time.Minute}
			t.Spec.Limits = &v1alpha1.Limits{RatePerSecond: 5, Burst: 10, DailyQuota: 100}
			t.Spec.Firewall = &v1alpha1.Firewall{AllowedCIDRs: []string{"10.0.0.0/8"}, MaxJSONDepth: 8, BlockedPatterns: []string{"(?i)lorem"}}
			t.Spec.Policies = []v1alpha1.PolicyModule{{Name: "house", Rego: "package storybus.tenant.house\n", Rules: []v1alpha1.TenantRule{{ID: "tenant.house.style", Status: 409}}}}
			t.Spec.Capacity = &v1alpha1.TenantCapacity{PolicyConcurrency: 2, RequestConcurrency: 32,
				Topic: &v1alpha1.TopicCapacity{MaxBytes: new(resource.MustParse("5Gi")), MaxMessages: 1000}}
		})},
		check: func(t *testing.T, w *config.Workspace) {
			if w.ID != "ws-1" || w.IdempotencyWindow.Duration != 240*time.Hour || w.TokenTTL.Duration != 30*time.Minute {
				t.Errorf("workspace: %+v", w)
			}
			if w.Limits != (config.Limits{RatePerSecond: 5, Burst: 10, DailyQuota: 100}) {
				t.Errorf("limits: %+v", w.Limits)
			}
			if w.Firewall.MaxJSONDepth != 8 || w.Firewall.AllowedCIDRs[0] != "10.0.0.0/8" || w.Firewall.BlockedPatterns[0] != "(?i)lorem" {
				t.Errorf("firewall: %+v", w.Firewall)
			}
			if len(w.Policies) != 1 || w.Policies[0].Name != "house" || w.Policies[0].Rules[0].Status != 409 {
				t.Errorf("policies: %+v", w.Policies)
			}
			if w.PolicyConcurrency != 2 || w.RequestConcurrency != 32 {
				t.Errorf("capacity: policyConcurrency %d, requestConcurrency %d", w.PolicyConcurrency, w.RequestConcurrency)
			}
			if w.Topic.Bytes() != 5<<30 || w.Topic.MaxMessages != 1000 {
				t.Errorf("topic: %d bytes, %d messages", w.Topic.Bytes(), w.Topic.MaxMessages)
			}
		},
	}, {
		name: "connections: ordered by name, hash of the trimmed secret, client id from the Secret, inactive, limits, rotation, other tenants ignored",
		in: Input{
			Tenant: tenant("newsroom"),
			Connections: []v1alpha1.Connection{
				conn("wire", "newsroom", func(c *v1alpha1.Connection) {
					c.Spec.Active = new(bool)
					c.Spec.Limits = &v1alpha1.Limits{RatePerSecond: 1}
					// The rotation time comes from the Secret, with the
					// secret it belongs to, never from the status.
					stale := metav1.NewTime(rotated.Add(-time.Hour))
					c.Status.CredentialsRotatedAt = &stale
				}),
				conn("cms", "newsroom", func(c *v1alpha1.Connection) { c.Spec.Credentials.SecretName = "cms-creds" }),
				conn("other", "elsewhere"),
				conn("pending", "newsroom"),
			},
			Secrets: map[string]*corev1.Secret{
				"cms-creds": secret("cms-creds", "cms-client", "cms-secret\n"),
				"wire-credentials": func() *corev1.Secret {
					s := secret("wire-credentials", "", "wire-secret")
					s.Annotations = map[string]string{v1alpha1.AnnotationRotatedAt: rotated.UTC().Format(time.RFC3339)}
					return s
				}(),
				"other-credentials": secret("other-credentials", "other", "x"),
			},
		},
		check: func(t *testing.T, w *config.Workspace) {
			if len(w.Connections) != 3 {
				t.Fatalf("connections: %+v", w.Connections)
			}
			cms, pending, wire := w.Connections[0], w.Connections[1], w.Connections[2]
			if cms.Name != "cms" || cms.ClientID != "cms-client" || cms.SecretHash != config.HashSecret("cms-secret") || !cms.IsActive() || cms.Limits != nil {
				t.Errorf("cms: %+v", cms)
			}
			if pending.Name != "pending" || pending.ClientID != "pending" || pending.SecretHash != "" {
				t.Errorf("a connection without its Secret yet has no hash: %+v", pending)
			}
			if wire.ClientID != "wire" || wire.IsActive() || wire.Limits.RatePerSecond != 1 || !wire.CredentialsRotatedAt.Equal(rotated.Time) {
				t.Errorf("wire: %+v", wire)
			}
		},
	}, {
		name: "grants of a connection add up in grant name order, without duplicates; other namespaces ignored",
		in: Input{
			Tenant:      tenant("newsroom"),
			Connections: []v1alpha1.Connection{conn("cms", "newsroom")},
			Grants: []v1alpha1.Grant{
				grant("b", "cms", &v1alpha1.PublishGrant{SystemIDs: []string{"cms", "cms-2"}, MessageTypes: []string{"story.event"}}, nil),
				grant("a", "cms", &v1alpha1.PublishGrant{SystemIDs: []string{"cms"}, MessageTypes: []string{"story.context"}}, &v1alpha1.ConsumeGrant{Families: []string{"story-context"}}),
				grant("c", "wire", &v1alpha1.PublishGrant{SystemIDs: []string{"wire"}}, nil),
				func() v1alpha1.Grant {
					g := grant("d", "cms", &v1alpha1.PublishGrant{SystemIDs: []string{"intruder"}}, nil)
					g.Namespace = "other"
					return g
				}(),
			},
		},
		check: func(t *testing.T, w *config.Workspace) {
			g := w.Connections[0].Grant
			if strings.Join(g.Publish.SystemIDs, ",") != "cms,cms-2" || strings.Join(g.Publish.MessageTypes, ",") != "story.context,story.event" ||
				strings.Join(g.Consume.Families, ",") != "story-context" {
				t.Errorf("grant: %+v", g)
			}
		},
	}, {
		name: "ownership policies merge in name order; refuse wins",
		in: Input{
			Tenant: tenant("newsroom"),
			OwnershipPolicies: []v1alpha1.OwnershipPolicy{
				ownershipPolicy("b", "newsroom", "refuse", []v1alpha1.OwnerRule{{StoryIDPattern: "b-.*", SystemID: "wire"}}, nil),
				ownershipPolicy("a", "newsroom", "tolerate", []v1alpha1.OwnerRule{{StoryIDPattern: "a-.*", SystemID: "cms"}}, []v1alpha1.Handoff{{StoryID: "s1", ToSystemID: "wire"}}),
				ownershipPolicy("z", "elsewhere", "refuse", []v1alpha1.OwnerRule{{StoryIDPattern: "(", SystemID: "x"}}, nil),
			},
		},
		check: func(t *testing.T, w *config.Workspace) {
			o := w.Ownership
			if o.NotOwner != config.NotOwnerRefuse || len(o.Owners) != 2 || o.Owners[0].StoryIDPattern != "a-.*" || o.Owners[1].SystemID != "wire" ||
				len(o.Handoffs) != 1 || o.Handoffs[0].StoryID != "s1" {
				t.Errorf("ownership: %+v", o)
			}
		},
	}, {
		name: "an ownership pattern that does not compile is an error naming the policy",
		in: Input{Tenant: tenant("newsroom"), OwnershipPolicies: []v1alpha1.OwnershipPolicy{
			ownershipPolicy("bad", "newsroom", "tolerate", []v1alpha1.OwnerRule{{StoryIDPattern: "(", SystemID: "cms"}}, nil),
		}},
		wantErr: "OwnershipPolicy bad: owners[0].storyIDPattern",
	}, {
		name: "two connections with one client id are an error",
		in: Input{
			Tenant:      tenant("newsroom"),
			Connections: []v1alpha1.Connection{conn("a", "newsroom"), conn("b", "newsroom")},
			Secrets: map[string]*corev1.Secret{
				"a-credentials": secret("a-credentials", "same", "s1"),
				"b-credentials": secret("b-credentials", "same", "s2"),
			},
		},
		wantErr: `clientID "same" is used twice`,
	}, {
		name: "a Secret controlled by another connection gives no credentials",
		in: Input{
			Tenant: tenant("newsroom"),
			Connections: []v1alpha1.Connection{
				conn("gen", "newsroom", func(c *v1alpha1.Connection) { c.UID = "uid-gen" }),
				conn("thief", "newsroom", func(c *v1alpha1.Connection) { c.UID = "uid-thief"; c.Spec.Credentials.SecretName = "gen-credentials" }),
			},
			Secrets: map[string]*corev1.Secret{"gen-credentials": func() *corev1.Secret {
				s := secret("gen-credentials", "gen", "s")
				s.OwnerReferences = []metav1.OwnerReference{{Kind: "Connection", Name: "gen", UID: "uid-gen", Controller: new(true)}}
				return s
			}()},
		},
		check: func(t *testing.T, w *config.Workspace) {
			gen, thief := w.Connections[0], w.Connections[1]
			if gen.ClientID != "gen" || gen.SecretHash == "" || thief.ClientID != "thief" || thief.SecretHash != "" {
				t.Errorf("gen %+v, thief %+v", gen, thief)
			}
		},
	}, {
		name:    "a module that is not Rego is an error naming the module and the parse error",
		in:      Input{Tenant: tenant("newsroom", withModule("desk", "package x\n\nthis is not rego at all"))},
		wantErr: "tenant/desk.rego:3: rego_parse_error",
	}, {
		name: "a module calling http.send is an error naming the module and the built-in",
		in: Input{Tenant: tenant("newsroom", withModule("exfil", `package storybus.tenant.exfil

warn contains {"rule": "tenant.sent", "message": "sent"} if {
	http.send({"method": "POST", "url": "http://127.0.0.1:1/", "body": input.message.doc})
}
`))},
		wantErr: "workspace module exfil, line 4: built-in http.send is not allowed in workspace policies",
	}, {
		name: "a module that compiles is in the configuration",
		in: Input{Tenant: tenant("newsroom", withModule("desk", `package storybus.tenant.desk

warn contains {"rule": "tenant.long", "message": "long"} if {
	count(input.message.doc.payload.headline) > 100
}
`))},
		check: func(t *testing.T, w *config.Workspace) {
			if len(w.Policies) != 1 || w.Policies[0].Name != "desk" || w.Policies[0].Rules[0].ID != "tenant.long" {
				t.Errorf("policies: %+v", w.Policies)
			}
		},
	}, {
		name:    "a short signing key is an error",
		in:      Input{Tenant: tenant("newsroom"), SigningKey: []byte("short")},
		wantErr: "signingKey must be at least 32 bytes",
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.in.SigningKey == nil {
				tc.in.SigningKey = signingKey
			}
			tc.in.SigningKeyFile = "/keys/signingKey"
			w, err := Compile(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.Is(err, ErrInvalid) {
					t.Fatalf("err = %v, want one containing %q and wrapping ErrInvalid", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, w)
		})
	}
}

func TestCompileIgnoresObjectsBeingDeleted(t *testing.T) {
	now := metav1.Now()
	c := conn("gone", "newsroom")
	c.DeletionTimestamp = &now
	w, err := Compile(Input{Tenant: tenant("newsroom"), Connections: []v1alpha1.Connection{c}, SigningKey: signingKey})
	if err != nil {
		t.Fatal(err)
	}
	if len(w.Connections) != 0 {
		t.Errorf("connections: %+v", w.Connections)
	}
}

func TestRotationTime(t *testing.T) {
	at := time.Date(2026, 11, 29, 9, 0, 0, 500_000_000, time.UTC)
	sec := at.Truncate(time.Second)
	tests := []struct {
		name string
		now  time.Time
		prev *time.Time
		want time.Time
	}{
		{"first rotation: now to the second", at, nil, sec},
		{"after an older one: now", at, new(sec.Add(-time.Minute)), sec},
		{"within the second of the last: one second later", at, &sec, sec.Add(time.Second)},
		{"the clock went back: one second after the last", at, new(sec.Add(time.Hour)), sec.Add(time.Hour + time.Second)},
	}
	for _, tc := range tests {
		if got := RotationTime(tc.now, tc.prev); !got.Equal(tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestIAMSecretAccessKeyIsAFile(t *testing.T) {
	withIAM := func(secretName string) func(*v1alpha1.Connection) {
		return func(c *v1alpha1.Connection) {
			c.Spec.IAM = &v1alpha1.ConnectionIAM{AccessKeySecretRef: v1alpha1.LocalObjectReference{Name: secretName}, RoleARN: "arn:aws:iam::123456789012:role/x"}
		}
	}
	aws := func(name, id, key string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Data: map[string][]byte{v1alpha1.IAMAccessKeyIDKey: []byte(id), v1alpha1.IAMSecretAccessKeyKey: []byte(key)}}
	}
	in := Input{
		Tenant: tenant("t"),
		Connections: []v1alpha1.Connection{
			conn("cms", "t", withIAM("aws-cms")),
			conn("nokey", "t", withIAM("aws-nokey")),
			conn("missing", "t", withIAM("aws-missing")),
			conn("other", "elsewhere", withIAM("aws-cms")),
		},
		Secrets: map[string]*corev1.Secret{
			"aws-cms":   aws("aws-cms", "AKIDCMS", "cms-secret\n"),
			"aws-nokey": aws("aws-nokey", "AKIDNOKEY", ""),
		},
		SigningKey: signingKey, SigningKeyFile: "/cfg/signingKey", SecretsDir: "/cfg",
	}
	w, err := Compile(in)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]config.Connection{}
	for _, c := range w.Connections {
		byName[c.Name] = c
	}
	if iam := byName["cms"].IAM; iam == nil || iam.AccessKeyID != "AKIDCMS" || iam.SecretAccessKey != "" || iam.SecretAccessKeyFile != "/cfg/iam.cms.secretAccessKey" {
		t.Errorf("cms iam %+v", iam)
	}
	if iam := byName["nokey"].IAM; iam == nil || iam.SecretAccessKeyFile != "" {
		t.Errorf("nokey iam %+v: a key without a secret names no file", iam)
	}
	if iam := byName["missing"].IAM; iam != nil {
		t.Errorf("missing iam %+v", iam)
	}
	files := SecretFiles(in)
	if len(files) != 1 || string(files["iam.cms.secretAccessKey"]) != "cms-secret" {
		t.Errorf("secret files %q", files)
	}
	in.SecretsDir = ""
	if w, _ := Compile(in); w.Connections[0].IAM.SecretAccessKeyFile != "" || len(SecretFiles(in)) != 0 {
		t.Error("without SecretsDir the key must be left out")
	}
}
