// Package v1alpha1 is the workspace configuration document, the contract
// between the operator, which compiles one for each Tenant, and the bus,
// which serves it: the workspace id, its connections and their
// credentials, grants, limits, ownership policy and own Rego modules, with
// their defaults and validation. Reading one from a file is
// bus/configfile's; importers name this package config.
package v1alpha1

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"
)

// APIVersion and Kind identify a workspace configuration document.
const (
	APIVersion = "bus.storybus.io/v1alpha1"
	Kind       = "WorkspaceConfig"
)

// MinIdempotencyWindow is the shortest time a message_id is remembered.
const MinIdempotencyWindow = 7 * 24 * time.Hour

// Ownership modes for story.not_owner.
const (
	NotOwnerTolerate = "tolerate"
	NotOwnerRefuse   = "refuse"
)

// workspaceIDPattern keeps workspace ids usable as NATS subject tokens,
// stream and bucket names and DNS labels.
var workspaceIDPattern = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// policyNamePattern keeps module names usable as Rego package path parts.
var policyNamePattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// secretHashPattern is the SecretHash form: "sha256:" and the hex digest.
var secretHashPattern = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// Duration is a time.Duration written as a Go duration string ("168h").
type Duration struct{ time.Duration }

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalJSON reads a Go duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration must be a string such as \"168h\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	d.Duration = v
	return nil
}

// Workspace is one workspace's whole configuration.
type Workspace struct {
	APIVersion string `json:"apiVersion,omitempty"`
	Kind       string `json:"kind,omitempty"`

	// ID is the workspace id, the {t} of every route.
	ID string `json:"workspace"`
	// IdempotencyWindow is how long a message_id is remembered; at least 168h.
	IdempotencyWindow Duration `json:"idempotencyWindow,omitempty"`
	// TokenTTL is the lifetime of access tokens; default 1h.
	TokenTTL Duration `json:"tokenTTL,omitempty"`
	// SigningKey signs the workspace's access tokens (HS256). At least 32
	// bytes. SigningKeyFile, when set, is read instead.
	SigningKey     string `json:"signingKey,omitempty"`
	SigningKeyFile string `json:"signingKeyFile,omitempty"`
	// Limits are the defaults for connections that set none.
	Limits Limits `json:"limits,omitempty"`
	// Ownership decides story ownership and story.not_owner.
	Ownership Ownership `json:"ownership,omitempty"`
	// Firewall holds the workspace's request rules.
	Firewall Firewall `json:"firewall,omitempty"`
	// Policies are the workspace's own Rego modules (stage 12).
	Policies []PolicyModule `json:"policies,omitempty"`
	// PolicyTimeout bounds one evaluation of the workspace's own modules,
	// from 1ms to 1s; zero takes the policy package's default (100ms).
	PolicyTimeout Duration `json:"policyTimeout,omitzero"`
	// PolicyConcurrency bounds the evaluations of the workspace's own
	// modules that run at once in one bus, from 1 to 64; zero takes the
	// policy package's default (half the bus's cores). Past it a publish
	// is answered 503 policy.busy, never queued.
	PolicyConcurrency int `json:"policyConcurrency,omitempty"`
	// RequestConcurrency bounds the workspace's publish requests past
	// authentication at once in one bus (their bodies, policy evaluations
	// and store operations), from 1 to 10,000; zero takes the bus's
	// default (64). Past it a publish is answered 503 workspace.busy,
	// never queued.
	RequestConcurrency int `json:"requestConcurrency,omitempty"`
	// Topic bounds what the workspace's topic holds on the store; unset,
	// it holds what the store lets it.
	Topic TopicLimits `json:"topic,omitzero"`
	// Connections are the producers and consumers allowed in.
	Connections []Connection `json:"connections,omitempty"`
	// Sandbox makes the workspace a sandbox for producers' tests: a
	// publish request may ask for any answer of the publish routes with the
	// Storybus-Sandbox-Answer header, which other workspaces refuse.
	Sandbox bool `json:"sandbox,omitempty"`
	// TLS is the workspace's own key pair, which a bus serving HTTPS
	// presents, instead of its own, to a client that names one of its
	// host names (SNI): a pool's replicas serve many workspaces and each
	// may bring its own certificate.
	TLS *WorkspaceTLS `json:"tls,omitempty"`

	// ConfigHash, when set, is the hash the operator gave the document:
	// the DocumentHash of its bytes before this field was added. It names
	// the document however a volume's files are written.
	ConfigHash string `json:"configHash,omitempty"`

	// Hash is ConfigHash, or else the DocumentHash of the bytes Parse read;
	// empty for a configuration built in memory. The bus reports it on its
	// operations port, so the operator can tell which configuration a pod
	// has loaded.
	Hash string `json:"-"`
}

// DocumentHash is the hash of a configuration document's bytes: "sha256:"
// and the hex digest. The operator annotates its ConfigMap with it and the
// bus reports it for the file it loaded, so the two can be compared.
func DocumentHash(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Limits are a connection's rate limit and daily quota. Zero means unlimited.
type Limits struct {
	RatePerSecond float64 `json:"ratePerSecond,omitempty"`
	Burst         int     `json:"burst,omitempty"`
	DailyQuota    int64   `json:"dailyQuota,omitempty"`
}

// The bounds of TopicLimits: past them a value is a mistake, not a
// limit. A topic under MinTopicBytes holds fewer than four messages of
// the largest size (240,000 bytes), one over MaxTopicBytes (1 PiB) or
// MaxTopicMessages (a trillion) more than any one store holds.
const (
	MinTopicBytes    = 1 << 20
	MaxTopicBytes    = 1 << 50
	MaxTopicMessages = 1_000_000_000_000
)

// TopicLimits bound a workspace's topic stream on the store: its bytes and
// its messages. Unset (or zero) leaves either unbounded, up to what the
// store and its account allow. A topic at a limit refuses the next publish
// (507 workspace.storage_full) and never drops a message it accepted: the
// stream discards new messages, not old ones.
type TopicLimits struct {
	// MaxBytes is the most the topic holds, counted as JetStream counts a
	// stream's bytes (each message's subject, headers and body, and a few
	// bytes of its own): a quantity such as "10Gi" or a number of bytes,
	// from 1Mi to 1Pi.
	MaxBytes *resource.Quantity `json:"maxBytes,omitempty"`
	// MaxMessages is the most messages the topic holds, from 1 to a
	// trillion.
	MaxMessages int64 `json:"maxMessages,omitempty"`
	// MaxAge is how long the topic keeps a message, at least the
	// idempotency window; it wins over the bus's --topic-retention. Unset:
	// the bus's. A story whose latest snapshot has aged out counts as new.
	MaxAge Duration `json:"maxAge,omitzero"`
}

// Retention is how long the topic keeps a message: MaxAge, or busDefault
// (the bus's --topic-retention; 0 keeps messages until the store's
// limits) when unset.
func (l TopicLimits) Retention(busDefault time.Duration) time.Duration {
	return cmp.Or(l.MaxAge.Duration, busDefault)
}

// Bytes returns MaxBytes in bytes, 0 when unset.
func (l TopicLimits) Bytes() int64 {
	if l.MaxBytes == nil {
		return 0
	}
	return l.MaxBytes.Value()
}

// Ownership is the workspace's story ownership policy.
type Ownership struct {
	// NotOwner is "tolerate" (the default: story.not_owner is a warning) or
	// "refuse" (409).
	NotOwner string `json:"notOwner,omitempty"`
	// Owners assign stories to systems by story id pattern (a Go regexp,
	// anchored) ahead of the first-snapshot rule.
	Owners []OwnerRule `json:"owners,omitempty"`
	// Handoffs reassign single stories; they win over everything else.
	Handoffs []Handoff `json:"handoffs,omitempty"`
}

// OwnerRule assigns the stories whose id matches StoryIDPattern to SystemID.
type OwnerRule struct {
	StoryIDPattern string `json:"storyIDPattern"`
	SystemID       string `json:"systemID"`
}

// Handoff hands one story to another system.
type Handoff struct {
	StoryID    string `json:"storyID"`
	ToSystemID string `json:"toSystemID"`
}

// Firewall rules refuse requests with 403 request.blocked.
type Firewall struct {
	// AllowedCIDRs, when not empty, are the only client addresses let in.
	AllowedCIDRs []string `json:"allowedCIDRs,omitempty"`
	// ContentTypes, when not empty, are the only media types let in.
	ContentTypes []string `json:"contentTypes,omitempty"`
	// MaxJSONDepth, when set, refuses deeper bodies.
	MaxJSONDepth int `json:"maxJSONDepth,omitempty"`
	// BlockedPatterns are regular expressions refused anywhere in the body.
	BlockedPatterns []string `json:"blockedPatterns,omitempty"`
}

// PolicyModule is one of the workspace's own Rego modules. Its package
// must be storybus.tenant.<name>; its `deny` and `warn` sets hold objects
// {"rule", "message", "path"} whose rule ids it declares in Rules.
type PolicyModule struct {
	// Name names the module; its package is storybus.tenant.<name>.
	Name string `json:"name"`
	// Rego is the module's source, in Rego v1 syntax.
	Rego string `json:"rego"`
	// Rules declares every rule id the module can emit.
	Rules []TenantRule `json:"rules,omitempty"`
}

// TenantRule is a rule a workspace's own module declares. Its id starts
// with "tenant.", so it can never shadow one of the bus's rules.
type TenantRule struct {
	ID string `json:"id"`
	// Status is 403 or 409 for a refusal; 0 for a rule only ever a warning.
	Status  int    `json:"status,omitempty"`
	Meaning string `json:"meaning,omitempty"`
	Fix     string `json:"fix,omitempty"`
}

// TenantRule returns the declared rule with the id.
func (w *Workspace) TenantRule(id string) (TenantRule, bool) {
	for _, m := range w.Policies {
		for _, r := range m.Rules {
			if r.ID == id {
				return r, true
			}
		}
	}
	return TenantRule{}, false
}

// Connection is one producer or consumer system.
type Connection struct {
	// Name identifies the connection in the workspace.
	Name string `json:"name"`
	// ClientID is the OAuth2 client id; default the name.
	ClientID string `json:"clientID,omitempty"`
	// SecretHash is "sha256:" and the hex SHA-256 of the client secret.
	// A fast hash is enough because no secret under MinSecretBytes is ever
	// accepted (CheckSecret, CheckSecretLength): the operator generates 32
	// random bytes, and refuses shorter secrets a user supplies.
	SecretHash string `json:"secretHash,omitempty"`
	// Active, when false, refuses everything with connection.inactive.
	Active *bool `json:"active,omitempty"`
	// CredentialsRotatedAt revokes every token issued before it.
	CredentialsRotatedAt *time.Time `json:"credentialsRotatedAt,omitempty"`
	// Limits override the workspace defaults.
	Limits *Limits `json:"limits,omitempty"`
	// Grant is what the connection may publish and consume.
	Grant Grant `json:"grant,omitempty"`
	// IAM binds AWS access keys to the connection for the iam routes.
	IAM *IAM `json:"iam,omitempty"`
	// TLSClientAuth lets the connection get tokens with a client
	// certificate instead of its secret.
	TLSClientAuth *TLSClientAuth `json:"tlsClientAuth,omitempty"`
}

// TLSClientAuth is OAuth 2.0 mutual-TLS client authentication (RFC 8705
// tls_client_auth): a client certificate that the bus verified against its
// client CAs authenticates the connection at the token endpoint when it
// carries this subject DN or this URI subject alternative name (a SPIFFE
// id). Exactly one of the two is set.
type TLSClientAuth struct {
	// SubjectDN is the certificate's whole subject in RFC 4514 form, as Go
	// writes it: "CN=cms,O=Newsroom".
	SubjectDN string `json:"subjectDN,omitempty"`
	// SANURI is one of the certificate's URI SANs:
	// "spiffe://cluster.local/ns/cms/sa/publisher".
	SANURI string `json:"sanURI,omitempty"`
}

// Grant lists what a connection may publish and consume. An empty list
// grants nothing.
type Grant struct {
	Publish PublishGrant `json:"publish,omitempty"`
	Consume ConsumeGrant `json:"consume,omitempty"`
}

// PublishGrant lists the system_ids and message_types a connection may
// publish; "*" grants all.
type PublishGrant struct {
	SystemIDs    []string `json:"systemIDs,omitempty"`
	MessageTypes []string `json:"messageTypes,omitempty"`
}

// ConsumeGrant lists the families a connection may read; "*" grants all.
type ConsumeGrant struct {
	Families []string `json:"families,omitempty"`
}

// IAM binds an AWS access key to a connection.
type IAM struct {
	AccessKeyID string `json:"accessKeyID"`
	// SecretAccessKey checks the key's signatures. SecretAccessKeyFile,
	// when set, is read instead, by Load and on every reload.
	SecretAccessKey     string `json:"secretAccessKey,omitempty"`
	SecretAccessKeyFile string `json:"secretAccessKeyFile,omitempty"`
	RoleARN             string `json:"roleARN,omitempty"`
	Verified            bool   `json:"verified,omitempty"`
}

// IsActive reports whether the connection may publish.
func (c *Connection) IsActive() bool { return c.Active == nil || *c.Active }

// MinSecretBytes is the shortest client secret the bus accepts. With at
// least 32 bytes of randomness, guessing is hopeless and a fast hash of
// the secret is safe to store; a short secret a person chose is neither.
const MinSecretBytes = 32

// CheckSecretLength refuses a client secret shorter than MinSecretBytes.
// The configuration holds only hashes, so the length is checked where a
// secret is seen: by the operator, on the secret it compiles into a hash,
// and by CheckSecret, on every secret presented.
func CheckSecretLength(secret string) error {
	if len(secret) < MinSecretBytes {
		return fmt.Errorf("the client secret is %d bytes; at least %d are required (for example, openssl rand -hex 32)", len(secret), MinSecretBytes)
	}
	return nil
}

// HashSecret returns the SecretHash form of a client secret.
func HashSecret(secret string) string { return DocumentHash([]byte(secret)) }

// Connection returns the named connection.
func (w *Workspace) Connection(name string) (*Connection, bool) {
	for i := range w.Connections {
		if w.Connections[i].Name == name {
			return &w.Connections[i], true
		}
	}
	return nil, false
}

// MaxClientIDBytes bounds a connection's client id: the token endpoint
// refuses a longer one before it looks anything up.
const MaxClientIDBytes = 512

// ConnectionByClientID returns the connection with the OAuth2 client id.
func (w *Workspace) ConnectionByClientID(id string) (*Connection, bool) {
	for i := range w.Connections {
		if w.Connections[i].ClientID == id {
			return &w.Connections[i], true
		}
	}
	return nil, false
}

// Parse decodes, defaults and validates a workspace configuration document.
// Unknown fields are errors, so a typo never silently drops a rule.
func Parse(b []byte) (*Workspace, error) {
	w, err := Decode(b)
	if err != nil {
		return nil, err
	}
	if w.SigningKeyFile != "" && w.SigningKey == "" {
		return w, nil // validated by Load once the key is read
	}
	if err := w.Validate(); err != nil {
		return nil, err
	}
	return w, nil
}

// Decode decodes and defaults a document, strictly (unknown fields are
// errors), without validating it: a file's loader reads the key files it
// names first (bus/configfile).
func Decode(b []byte) (*Workspace, error) {
	var w Workspace
	if err := yaml.UnmarshalStrict(b, &w); err != nil {
		return nil, err
	}
	w.Default()
	w.Hash = w.ConfigHash
	if w.Hash == "" {
		w.Hash = DocumentHash(b)
	}
	return &w, nil
}

// Default fills unset fields with their defaults.
func (w *Workspace) Default() {
	if w.APIVersion == "" {
		w.APIVersion = APIVersion
	}
	if w.Kind == "" {
		w.Kind = Kind
	}
	if w.IdempotencyWindow.Duration == 0 {
		w.IdempotencyWindow.Duration = MinIdempotencyWindow
	}
	if w.TokenTTL.Duration == 0 {
		w.TokenTTL.Duration = time.Hour
	}
	if w.Ownership.NotOwner == "" {
		w.Ownership.NotOwner = NotOwnerTolerate
	}
	for i := range w.Connections {
		if w.Connections[i].ClientID == "" {
			w.Connections[i].ClientID = w.Connections[i].Name
		}
	}
}

// Validate reports every problem with the configuration at once.
func (w *Workspace) Validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if w.APIVersion != APIVersion || w.Kind != Kind {
		add("apiVersion/kind must be %s/%s", APIVersion, Kind)
	}
	if !workspaceIDPattern.MatchString(w.ID) {
		add("workspace %q must be a DNS label: lower-case letters, digits and '-', at most 63", w.ID)
	}
	if w.IdempotencyWindow.Duration < MinIdempotencyWindow {
		add("idempotencyWindow %s is under the minimum of 168h", w.IdempotencyWindow.Duration)
	}
	if w.TokenTTL.Duration < time.Minute || w.TokenTTL.Duration > 24*time.Hour {
		add("tokenTTL %s must be between 1m and 24h", w.TokenTTL.Duration)
	}
	if len(w.SigningKey) < 32 {
		add("signingKey must be at least 32 bytes")
	}
	if w.Ownership.NotOwner != NotOwnerTolerate && w.Ownership.NotOwner != NotOwnerRefuse {
		add("ownership.notOwner %q must be tolerate or refuse", w.Ownership.NotOwner)
	}
	for i, o := range w.Ownership.Owners {
		if _, err := regexp.Compile("^(?:" + o.StoryIDPattern + ")$"); err != nil {
			add("ownership.owners[%d].storyIDPattern: %v", i, err)
		}
	}
	for i, p := range w.Firewall.BlockedPatterns {
		if _, err := regexp.Compile(p); err != nil {
			add("firewall.blockedPatterns[%d]: %v", i, err)
		}
	}
	if d := w.PolicyTimeout.Duration; d != 0 && (d < time.Millisecond || d > time.Second) {
		add("policyTimeout %s must be between 1ms and 1s", d)
	}
	if n := w.PolicyConcurrency; n < 0 || n > 64 {
		add("policyConcurrency %d must be between 1 and 64", n)
	}
	if n := w.RequestConcurrency; n < 0 || n > 10000 {
		add("requestConcurrency %d must be between 1 and 10000", n)
	}
	if q := w.Topic.MaxBytes; q != nil && !q.IsZero() && (q.Cmp(*resource.NewQuantity(MinTopicBytes, resource.BinarySI)) < 0 || q.Cmp(*resource.NewQuantity(MaxTopicBytes, resource.BinarySI)) > 0) {
		add("topic.maxBytes %s must be between 1Mi and 1Pi", q)
	}
	if n := w.Topic.MaxMessages; n < 0 || n > MaxTopicMessages {
		add("topic.maxMessages %d must be between 1 and 1000000000000", n)
	}
	if d := w.Topic.MaxAge.Duration; d < 0 || (d > 0 && d < w.IdempotencyWindow.Duration) {
		add("topic.maxAge %s is shorter than idempotencyWindow %s", d, w.IdempotencyWindow.Duration)
	}
	modules, tenantRules := map[string]bool{}, map[string]bool{}
	for i, m := range w.Policies {
		if !policyNamePattern.MatchString(m.Name) || modules[m.Name] {
			add("policies[%d].name %q must be a unique identifier (letters, digits, _)", i, m.Name)
		}
		modules[m.Name] = true
		for j, r := range m.Rules {
			if !strings.HasPrefix(r.ID, "tenant.") || tenantRules[r.ID] {
				add("policies[%d].rules[%d].id %q must start with tenant. and be unique", i, j, r.ID)
			}
			tenantRules[r.ID] = true
			if r.Status != 0 && r.Status != 403 && r.Status != 409 {
				add("policies[%d].rules[%d].status %d must be 403, 409, or 0 for a warning", i, j, r.Status)
			}
		}
	}
	names, clients, accessKeys, certs := map[string]bool{}, map[string]bool{}, map[string]bool{}, map[TLSClientAuth]bool{}
	for i, c := range w.Connections {
		if c.Name == "" {
			add("connections[%d].name is required", i)
		}
		if names[c.Name] {
			add("connections[%d].name %q is used twice", i, c.Name)
		}
		if len(c.ClientID) > MaxClientIDBytes {
			add("connections[%d].clientID is %d bytes, over %d", i, len(c.ClientID), MaxClientIDBytes)
		}
		if clients[c.ClientID] {
			add("connections[%d].clientID %q is used twice", i, c.ClientID)
		}
		names[c.Name], clients[c.ClientID] = true, true
		if c.IAM != nil && c.IAM.AccessKeyID != "" {
			if accessKeys[c.IAM.AccessKeyID] {
				add("connections[%d].iam.accessKeyID %q is bound to two connections", i, c.IAM.AccessKeyID)
			}
			accessKeys[c.IAM.AccessKeyID] = true
		}
		if a := c.TLSClientAuth; a != nil {
			if (a.SubjectDN == "") == (a.SANURI == "") {
				add("connections[%d].tlsClientAuth needs exactly one of subjectDN and sanURI", i)
			}
			if certs[*a] {
				add("connections[%d].tlsClientAuth matches the same certificates as another connection", i)
			}
			certs[*a] = true
		}
		if c.SecretHash != "" && !secretHashPattern.MatchString(c.SecretHash) {
			add("connections[%d].secretHash must be sha256: and 64 lower-case hex digits", i)
		}
	}
	if w.TLS != nil {
		if err := w.TLS.validate(); err != nil {
			add("tls: %v", err)
		}
	}
	return errors.Join(errs...)
}
