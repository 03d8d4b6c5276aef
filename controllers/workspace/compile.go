// Package workspace compiles a Tenant and the Connections, Grants,
// OwnershipPolicies and Secrets that refer to it into the workspace
// configuration (the api/config/v1alpha1 Workspace) its bus pods serve. Compile is pure:
// it reads only its input, so the operator, tests and tools get the same
// document from the same objects.
package workspace

import (
	"cmp"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	config "github.com/storybus/storybus/api/config/v1alpha1"
	"github.com/storybus/storybus/api/v1alpha1"
	"github.com/storybus/storybus/policy"
)

// Input is everything one Tenant's configuration is compiled from. Objects
// of other Tenants or namespaces in the slices are ignored, so a caller may
// pass a superset.
type Input struct {
	// Tenant is the workspace.
	Tenant *v1alpha1.Tenant
	// Connections, Grants and OwnershipPolicies are the objects that may
	// refer to the Tenant.
	Connections       []v1alpha1.Connection
	Grants            []v1alpha1.Grant
	OwnershipPolicies []v1alpha1.OwnershipPolicy
	// Secrets are the Secrets of the Tenant's namespace that Connections
	// name (credentials and IAM access keys), by name. A missing one leaves
	// the connection without credentials (it cannot get tokens) or without
	// IAM keys.
	Secrets map[string]*corev1.Secret
	// SigningKey is the workspace's token signing key. It is checked, never
	// written into the configuration.
	SigningKey []byte
	// SigningKeyFile is where the bus reads the signing key; it is written
	// into the configuration as signingKeyFile.
	SigningKeyFile string
	// SecretsDir is where the bus reads the files of SecretFiles (the
	// Tenant's Secret, mounted); each connection's IAM secret access key is
	// written into the configuration as iam.secretAccessKeyFile under it.
	// Empty leaves secret access keys out of the configuration.
	SecretsDir string
}

// ErrInvalid marks a configuration that cannot be compiled because of what
// the objects say: the user must change them.
var ErrInvalid = errors.New("invalid workspace configuration")

// Compile returns the workspace configuration of in.Tenant, defaulted and
// validated as the bus would. Connections are ordered by name; the Grants of
// a connection add up in Grant name order; OwnershipPolicies are merged in
// name order (owners and handoffs concatenated, refuse wins over tolerate).
// The Tenant's own Rego modules are compiled as the bus compiles them
// (policy.CheckModules). Errors wrap ErrInvalid.
func Compile(in Input) (*config.Workspace, error) {
	t := in.Tenant
	if t == nil {
		return nil, fmt.Errorf("%w: no tenant", ErrInvalid)
	}
	w := &config.Workspace{
		APIVersion:     config.APIVersion,
		Kind:           config.Kind,
		ID:             t.EffectiveWorkspaceID(),
		SigningKeyFile: in.SigningKeyFile,
		Policies:       policies(t.Spec.Policies),
		Sandbox:        t.Spec.Sandbox,
	}
	if d := t.Spec.IdempotencyWindow; d != nil {
		w.IdempotencyWindow.Duration = d.Duration
	}
	if d := t.Spec.TokenTTL; d != nil {
		w.TokenTTL.Duration = d.Duration
	}
	if l := t.Spec.Limits; l != nil {
		w.Limits = limits(*l)
	}
	if c := t.Spec.Capacity; c != nil {
		w.PolicyConcurrency, w.RequestConcurrency = int(c.PolicyConcurrency), int(c.RequestConcurrency)
		if tc := c.Topic; tc != nil {
			w.Topic = config.TopicLimits{MaxMessages: tc.MaxMessages}
			if tc.MaxAge != nil {
				w.Topic.MaxAge.Duration = tc.MaxAge.Duration
			}
			if tc.MaxBytes != nil {
				q := tc.MaxBytes.DeepCopy()
				w.Topic.MaxBytes = &q
			}
		}
	}
	if f := t.Spec.Firewall; f != nil {
		w.Firewall = config.Firewall{
			AllowedCIDRs:    slices.Clone(f.AllowedCIDRs),
			ContentTypes:    slices.Clone(f.ContentTypes),
			MaxJSONDepth:    int(f.MaxJSONDepth),
			BlockedPatterns: slices.Clone(f.BlockedPatterns),
		}
	}

	var errs []error
	own, err := ownership(t, in.OwnershipPolicies)
	errs = append(errs, err)
	w.Ownership = own

	conns := Belonging(t, in.Connections)
	grants := grantsByConnection(t.Namespace, in.Grants)
	for i := range conns {
		c := &conns[i]
		w.Connections = append(w.Connections, connection(c, grants[c.Name], in.Secrets, in.SecretsDir))
	}

	w.Default()
	check := *w
	check.SigningKey, check.SigningKeyFile = string(in.SigningKey), ""
	errs = append(errs, check.Validate())
	if len(w.Policies) > 0 {
		// The same compile as the bus's at load, sandbox included: a module
		// the bus would refuse never reaches the ConfigMap.
		errs = append(errs, policy.CheckModules(w.Policies))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return w, nil
}

// Belonging returns the connections of cs that belong to t (same namespace,
// tenantRef naming it, not being deleted), ordered by name.
func Belonging(t *v1alpha1.Tenant, cs []v1alpha1.Connection) []v1alpha1.Connection {
	var out []v1alpha1.Connection
	for _, c := range cs {
		if c.Namespace == t.Namespace && c.Spec.TenantRef.Name == t.Name && c.DeletionTimestamp.IsZero() {
			out = append(out, c)
		}
	}
	slices.SortFunc(out, func(a, b v1alpha1.Connection) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// SecretFiles returns the files the bus reads next to the configuration
// Compile makes from in, by file name: each connection's IAM secret access
// key, copied from the Secret its spec.iam.accessKeySecretRef names. The
// operator keeps them in the Tenant's Secret, mounted at in.SecretsDir.
func SecretFiles(in Input) map[string][]byte {
	out := map[string][]byte{}
	if in.Tenant == nil || in.SecretsDir == "" {
		return out
	}
	for _, c := range Belonging(in.Tenant, in.Connections) {
		if _, key := IAMKeys(&c, in.Secrets); key != "" {
			out[IAMSecretAccessKeyFile(c.Name)] = []byte(key)
		}
	}
	return out
}

// IAMSecretAccessKeyFile is the file name (and the key in the Tenant's
// Secret) of the IAM secret access key of the named connection.
func IAMSecretAccessKeyFile(connection string) string {
	return "iam." + connection + ".secretAccessKey"
}

// IAMKeys returns the access key id and secret access key of c's IAM
// Secret (looked up by name in secrets), trimmed; empty when c binds none,
// or its Secret or the id in it is missing.
func IAMKeys(c *v1alpha1.Connection, secrets map[string]*corev1.Secret) (id, key string) {
	iam := c.Spec.IAM
	if iam == nil {
		return "", ""
	}
	s := secrets[iam.AccessKeySecretRef.Name]
	if s == nil {
		return "", ""
	}
	id = strings.TrimSpace(string(s.Data[v1alpha1.IAMAccessKeyIDKey]))
	if id == "" {
		return "", ""
	}
	return id, strings.TrimSpace(string(s.Data[v1alpha1.IAMSecretAccessKeyKey]))
}

func connection(c *v1alpha1.Connection, grants []v1alpha1.Grant, secrets map[string]*corev1.Secret, secretsDir string) config.Connection {
	out := config.Connection{Name: c.Name, ClientID: c.Name}
	// A Secret another Connection controls holds that connection's
	// credentials, never this one's (its status says SecretInUse).
	if s := secrets[c.CredentialsSecretName()]; s != nil && !controlledByOther(s, c) {
		if id := strings.TrimSpace(string(s.Data[v1alpha1.CredentialsClientIDKey])); id != "" {
			out.ClientID = id
		}
		if secret := strings.TrimSpace(string(s.Data[v1alpha1.CredentialsClientSecretKey])); secret != "" {
			out.SecretHash = config.HashSecret(secret)
		}
	}
	if !c.IsActive() {
		out.Active = new(bool)
	}
	// The rotation time comes with the secret it revokes tokens for, from
	// the same Secret: one rotation is one configuration.
	if s := secrets[c.CredentialsSecretName()]; s != nil && !controlledByOther(s, c) {
		out.CredentialsRotatedAt = CredentialsRotatedAt(s)
	}
	if l := c.Spec.Limits; l != nil {
		cl := limits(*l)
		out.Limits = &cl
	}
	for _, g := range grants {
		if p := g.Spec.Publish; p != nil {
			out.Grant.Publish.SystemIDs = union(out.Grant.Publish.SystemIDs, p.SystemIDs)
			out.Grant.Publish.MessageTypes = union(out.Grant.Publish.MessageTypes, p.MessageTypes)
		}
		if cg := g.Spec.Consume; cg != nil {
			out.Grant.Consume.Families = union(out.Grant.Consume.Families, cg.Families)
		}
	}
	if id, key := IAMKeys(c, secrets); id != "" {
		// The secret access key itself never enters the configuration (a
		// ConfigMap): the bus reads it from the Tenant's Secret, mounted.
		out.IAM = &config.IAM{AccessKeyID: id, RoleARN: c.Spec.IAM.RoleARN, Verified: c.Spec.IAM.Verified}
		if key != "" && secretsDir != "" {
			out.IAM.SecretAccessKeyFile = secretsDir + "/" + IAMSecretAccessKeyFile(c.Name)
		}
	}
	return out
}

// grantsByConnection groups the grants of namespace ns by connection name,
// each group ordered by grant name.
func grantsByConnection(ns string, gs []v1alpha1.Grant) map[string][]v1alpha1.Grant {
	sorted := slices.Clone(gs)
	slices.SortFunc(sorted, func(a, b v1alpha1.Grant) int { return cmp.Compare(a.Name, b.Name) })
	out := map[string][]v1alpha1.Grant{}
	for _, g := range sorted {
		if g.Namespace == ns && g.DeletionTimestamp.IsZero() {
			out[g.Spec.ConnectionRef.Name] = append(out[g.Spec.ConnectionRef.Name], g)
		}
	}
	return out
}

func ownership(t *v1alpha1.Tenant, ps []v1alpha1.OwnershipPolicy) (config.Ownership, error) {
	var mine []v1alpha1.OwnershipPolicy
	for _, p := range ps {
		if p.Namespace == t.Namespace && p.Spec.TenantRef.Name == t.Name && p.DeletionTimestamp.IsZero() {
			mine = append(mine, p)
		}
	}
	slices.SortFunc(mine, func(a, b v1alpha1.OwnershipPolicy) int { return cmp.Compare(a.Name, b.Name) })
	var out config.Ownership
	var errs []error
	for _, p := range mine {
		if err := ValidateOwnershipPolicy(&p.Spec); err != nil {
			errs = append(errs, fmt.Errorf("OwnershipPolicy %s: %w", p.Name, err))
			continue
		}
		switch {
		case p.Spec.NotOwner == v1alpha1.NotOwnerRefuse:
			out.NotOwner = config.NotOwnerRefuse
		case out.NotOwner == "":
			out.NotOwner = config.NotOwnerTolerate
		}
		for _, o := range p.Spec.Owners {
			out.Owners = append(out.Owners, config.OwnerRule{StoryIDPattern: o.StoryIDPattern, SystemID: o.SystemID})
		}
		for _, h := range p.Spec.Handoffs {
			out.Handoffs = append(out.Handoffs, config.Handoff{StoryID: h.StoryID, ToSystemID: h.ToSystemID})
		}
	}
	return out, errors.Join(errs...)
}

// ValidateOwnershipPolicy checks what the API server's validation cannot:
// every owners[].storyIDPattern compiles as a Go regular expression (the bus
// anchors it to the whole story id).
func ValidateOwnershipPolicy(spec *v1alpha1.OwnershipPolicySpec) error {
	var errs []error
	for i, o := range spec.Owners {
		if _, err := regexp.Compile("^(?:" + o.StoryIDPattern + ")$"); err != nil {
			errs = append(errs, fmt.Errorf("owners[%d].storyIDPattern: %w", i, err))
		}
	}
	return errors.Join(errs...)
}

// controlledByOther reports whether s has a controller other than c.
func controlledByOther(s *corev1.Secret, c *v1alpha1.Connection) bool {
	ref := metav1.GetControllerOf(s)
	return ref != nil && ref.UID != c.UID
}

func limits(l v1alpha1.Limits) config.Limits {
	return config.Limits{RatePerSecond: float64(l.RatePerSecond), Burst: int(l.Burst), DailyQuota: l.DailyQuota}
}

// union appends to a the elements of b it lacks, keeping order.
func union(a, b []string) []string {
	for _, s := range b {
		if !slices.Contains(a, s) {
			a = append(a, s)
		}
	}
	return a
}

func policies(ms []v1alpha1.PolicyModule) []config.PolicyModule {
	var out []config.PolicyModule
	for _, m := range ms {
		pm := config.PolicyModule{Name: m.Name, Rego: m.Rego}
		for _, r := range m.Rules {
			pm.Rules = append(pm.Rules, config.TenantRule{ID: r.ID, Status: int(r.Status), Meaning: r.Meaning, Fix: r.Fix})
		}
		out = append(out, pm)
	}
	return out
}

// CredentialsRotatedAt returns when the client secret in the credentials
// Secret s was last rotated (its rotated-at annotation), nil when s is nil
// or has no valid one.
func CredentialsRotatedAt(s *corev1.Secret) *time.Time {
	if s == nil {
		return nil
	}
	at, err := time.Parse(time.RFC3339, s.Annotations[v1alpha1.AnnotationRotatedAt])
	if err != nil {
		return nil
	}
	at = at.UTC()
	return &at
}

// RotationTime returns the credentialsRotatedAt to record for a rotation at
// now: now to the second (the precision of the Connection's status), and
// always after prev, so that two rotations within a second still revoke the
// tokens issued between them.
func RotationTime(now time.Time, prev *time.Time) time.Time {
	at := now.UTC().Truncate(time.Second)
	if prev != nil && !at.After(*prev) {
		at = prev.UTC().Truncate(time.Second).Add(time.Second)
	}
	return at
}
