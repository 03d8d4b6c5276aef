package controllers

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/yaml"

	config "github.com/storybus/storybus/api/config/v1alpha1"
	"github.com/storybus/storybus/api/v1alpha1"
	"github.com/storybus/storybus/controllers/workspace"
)

// TenantConfigurationReconciler compiles a Tenant's workspace
// configuration from the Tenant, its Connections, their Grants and
// Secrets, and its OwnershipPolicies, into the Tenant's ConfigMap and
// Secret. It owns ConfigurationValid, status.configHash and the list of
// objects compiled.
type TenantConfigurationReconciler struct {
	objectWriter
	// Secrets reads and watches Secrets.
	Secrets *Secrets
	// Recorder records Events on the Tenant.
	Recorder events.EventRecorder
}

// configurationScope is what the phases of one reconcile share.
type configurationScope struct {
	tenant *v1alpha1.Tenant
	// secret is the Tenant's Secret as read; signingKey is its key.
	secret     *corev1.Secret
	signingKey []byte
	// secretFiles are the files the configuration names besides the
	// signing key, by key in the Tenant's Secret.
	secretFiles map[string][]byte
	// configYAML and configHash are set when the configuration compiled.
	configYAML  []byte
	configHash  string
	connections int
	// compiledFrom lists the objects the configuration was compiled from.
	compiledFrom []v1alpha1.CompiledObject
	// compileErr is why the configuration did not compile.
	compileErr error
	// conflict is the ConfigMap or Secret name taken by an object the
	// Tenant does not control.
	conflict error
	// hasConfigMap is true when a valid configuration is in the ConfigMap,
	// written now or before.
	hasConfigMap bool
}

// +kubebuilder:rbac:groups=bus.storybus.io,resources=tenants,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=bus.storybus.io,resources=tenants/status,verbs=get;patch
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch

// Reconcile compiles one Tenant's configuration.
func (r *TenantConfigurationReconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, err error) {
	t := &v1alpha1.Tenant{}
	if err := r.Get(ctx, req.NamespacedName, t); err != nil {
		if apierrors.IsNotFound(err) {
			forgetTenantMetrics(req.NamespacedName)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("get tenant: %w", err)
	}
	if !t.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	before := t.DeepCopy()
	s := &configurationScope{tenant: t}
	defer func() {
		s.setStatus()
		err = errors.Join(err, configurationStatus.write(ctx, r.Client, r.Recorder, t, before))
	}()
	res, err := doReconcile(ctx, s,
		r.reconcileSigningKey,
		r.compile,
		r.reconcileSecretFiles,
		r.reconcileConfigMap,
		r.recordConfiguration,
	)
	if err == nil && s.compileErr != nil {
		err = terminal(s.compileErr)
	}
	return res, err
}

// setStatus writes what the reconcile decided into the Tenant's status:
// ConfigurationValid, and the configuration compiled. A reconcile that
// decided nothing (an API error before) leaves both as they were.
func (s *configurationScope) setStatus() {
	t := s.tenant
	switch {
	case s.conflict != nil:
		setCondition(t, nameConflictCondition(v1alpha1.ConditionConfigurationValid, s.conflict))
	case s.compileErr != nil && t.Status.ConfigHash != "":
		setCondition(t, cond(v1alpha1.ConditionConfigurationValid, metav1.ConditionFalse, v1alpha1.ReasonInvalidConfiguration,
			"%v; the ConfigMap keeps the last valid configuration %s", s.compileErr, t.Status.ConfigHash))
	case s.compileErr != nil:
		setCondition(t, cond(v1alpha1.ConditionConfigurationValid, metav1.ConditionFalse, v1alpha1.ReasonInvalidConfiguration,
			"%v; there has been no valid configuration, so no bus runs", s.compileErr))
	case s.hasConfigMap && s.configHash != "":
		setCondition(t, cond(v1alpha1.ConditionConfigurationValid, metav1.ConditionTrue, v1alpha1.ReasonCompiled,
			"configuration %s with %d connection(s)", s.configHash, s.connections))
		if s.configHash != t.Status.ConfigHash {
			t.Status.ConfigGeneration++
		}
		t.Status.ConfigHash = s.configHash
		t.Status.Connections = int32(s.connections)
		t.Status.Compiled = s.compiledFrom
	}
}

// reconcileSigningKey makes the signing key Secret once and keeps it.
func (r *TenantConfigurationReconciler) reconcileSigningKey(ctx context.Context, s *configurationScope) (ctrl.Result, error) {
	t := s.tenant
	name := signingKeyName(t)
	sec := &corev1.Secret{}
	err := r.Secrets.Get(ctx, types.NamespacedName{Namespace: t.Namespace, Name: name}, sec)
	switch {
	case apierrors.IsNotFound(err):
		sec = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: t.Namespace, Labels: tenantLabels(t)},
			Type:       corev1.SecretTypeOpaque,
			Data:       map[string][]byte{SigningKeyKey: []byte(randomHex(32))},
		}
		if err := controllerutil.SetControllerReference(t, sec, r.Scheme()); err != nil {
			return ctrl.Result{}, fmt.Errorf("signing key owner: %w", err)
		}
		// A new Tenant's key is a step of its creation, which records no
		// Event (recordConditionEvents); a key replaced below is not.
		if err := r.Create(ctx, sec); err != nil {
			return ctrl.Result{}, fmt.Errorf("create signing key secret: %w", err)
		}
	case err != nil:
		return ctrl.Result{}, fmt.Errorf("get signing key secret: %w", err)
	case !controlledBy(sec, t):
		s.conflict = &nameConflictError{kind: "Secret", name: name, tenant: t.Name}
		return ctrl.Result{}, terminal(s.conflict)
	case ensureManagedLabel(sec):
		if err := r.Update(ctx, sec); err != nil {
			return ctrl.Result{}, fmt.Errorf("label signing key secret: %w", err)
		}
	case len(strings.TrimSpace(string(sec.Data[SigningKeyKey]))) < 32:
		if sec.Data == nil {
			sec.Data = map[string][]byte{}
		}
		sec.Data[SigningKeyKey] = []byte(randomHex(32))
		if err := r.Update(ctx, sec); err != nil {
			return ctrl.Result{}, fmt.Errorf("update signing key secret: %w", err)
		}
		r.Recorder.Eventf(t, sec, corev1.EventTypeWarning, "SigningKeyGenerated", "Update", "Secret %s held no usable signing key: generated a new one, earlier tokens are invalid", name)
	}
	s.secret = sec
	s.signingKey = []byte(strings.TrimSpace(string(sec.Data[SigningKeyKey])))
	return ctrl.Result{}, nil
}

// compile gathers the Tenant's Connections, their Grants and Secrets, and
// its OwnershipPolicies, and compiles the workspace configuration. A
// configuration that does not compile is recorded, not returned: the bus
// keeps serving the last valid configuration.
func (r *TenantConfigurationReconciler) compile(ctx context.Context, s *configurationScope) (ctrl.Result, error) {
	t := s.tenant
	in := workspace.Input{
		Tenant:         t,
		Secrets:        map[string]*corev1.Secret{},
		SigningKey:     s.signingKey,
		SigningKeyFile: ConfigDir + "/" + SigningKeyKey,
		SecretsDir:     ConfigDir,
	}
	conns, err := connectionsOfTenant(ctx, r.Client, t.Namespace, t.Name)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("list connections: %w", err)
	}
	in.Connections = conns
	for i := range conns {
		c := &conns[i]
		gs, err := grantsOfConnection(ctx, r.Client, t.Namespace, c.Name)
		if err != nil {
			return ctrl.Result{}, fmt.Errorf("list grants: %w", err)
		}
		in.Grants = append(in.Grants, gs...)
		for _, name := range connectionSecretNames(c) {
			sec := &corev1.Secret{}
			err := r.Secrets.Get(ctx, types.NamespacedName{Namespace: t.Namespace, Name: name}, sec)
			switch {
			case apierrors.IsNotFound(err):
			case err != nil:
				return ctrl.Result{}, fmt.Errorf("get secret %s: %w", name, err)
			default:
				in.Secrets[name] = sec
			}
		}
	}
	if wait := credentialsPending(conns, in.Secrets, time.Now()); wait > 0 {
		// The Secret's creation brings the Tenant back (its watch); the
		// wait bounds how long a Secret that does not come holds it up.
		return requeueAfter(wait), nil
	}
	if in.OwnershipPolicies, err = policiesOfTenant(ctx, r.Client, t.Namespace, t.Name); err != nil {
		return ctrl.Result{}, fmt.Errorf("list ownership policies: %w", err)
	}
	// The cache lists in no fixed order; the status lists them by name, so
	// that a configuration compiled again from the same objects is the
	// same status.
	slices.SortFunc(in.Connections, func(a, b v1alpha1.Connection) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(in.Grants, func(a, b v1alpha1.Grant) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(in.OwnershipPolicies, func(a, b v1alpha1.OwnershipPolicy) int { return strings.Compare(a.Name, b.Name) })
	w, err := workspace.Compile(in)
	if err != nil {
		s.compileErr = err
		return ctrl.Result{}, nil
	}
	s.compiledFrom = compiledObjects(in)
	s.configYAML, s.configHash, err = r.workspaceDocument(ctx, t, w)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("marshal workspace configuration: %w", err)
	}
	s.connections = len(w.Connections)
	s.secretFiles = workspace.SecretFiles(in)
	return ctrl.Result{}, nil
}

// credentialsWait is how long after a Connection's creation the Tenant's
// configuration waits for its credentials Secret: the Connection
// credentials controller makes one in its first reconcile, and a configuration
// compiled before it lists the Connection without a hash, to be compiled,
// written and loaded again once it comes. At hundreds of Tenants, with
// the credentials controller's queue seconds behind, that was two or three
// configurations more per Tenant, each written, loaded and reported; in
// bursts of 500 to 1,000 Tenants the queue ran more than the 30 s this
// was before behind. A Tenant created alone has its Secrets in a second.
const credentialsWait = 2 * time.Minute

// credentialsPending returns how much longer a compile should wait for
// the credentials Secrets of conns (secrets holds those that exist): the
// longest wait of a Connection created less than credentialsWait ago
// whose Secret is not there and whose status shows no failure; 0 to
// compile now.
func credentialsPending(conns []v1alpha1.Connection, secrets map[string]*corev1.Secret, now time.Time) time.Duration {
	var wait time.Duration
	for i := range conns {
		c := &conns[i]
		if secrets[c.CredentialsSecretName()] != nil || !onlyProgress(c.Status.Conditions) || !c.DeletionTimestamp.IsZero() {
			continue
		}
		wait = max(wait, credentialsWait-now.Sub(c.CreationTimestamp.Time))
	}
	return wait
}

// reconcileSecretFiles keeps the Tenant's Secret holding exactly the signing
// key and the files the compiled configuration names. It runs before the
// ConfigMap is written, so a configuration never names a file its Secret
// lacks; a configuration that did not compile leaves the Secret as it is.
func (r *TenantConfigurationReconciler) reconcileSecretFiles(ctx context.Context, s *configurationScope) (ctrl.Result, error) {
	if s.configYAML == nil {
		return ctrl.Result{}, nil
	}
	want := map[string][]byte{SigningKeyKey: s.secret.Data[SigningKeyKey]}
	maps.Copy(want, s.secretFiles)
	if maps.EqualFunc(want, s.secret.Data, bytes.Equal) {
		return ctrl.Result{}, nil
	}
	s.secret.Data = want
	if err := r.Update(ctx, s.secret); err != nil {
		return ctrl.Result{}, fmt.Errorf("update secret %s: %w", s.secret.Name, err)
	}
	return ctrl.Result{}, nil
}

// reconcileConfigMap writes the compiled configuration into the Tenant's
// ConfigMap, or keeps the last valid one when it did not compile.
func (r *TenantConfigurationReconciler) reconcileConfigMap(ctx context.Context, s *configurationScope) (ctrl.Result, error) {
	t := s.tenant
	cm := &corev1.ConfigMap{}
	exists, err := r.current(ctx, t, "ConfigMap", configMapName(t), cm)
	if err != nil {
		if errors.As(err, new(*nameConflictError)) {
			s.conflict = err
			return ctrl.Result{}, terminal(err)
		}
		return ctrl.Result{}, err
	}
	if s.configYAML == nil {
		s.hasConfigMap = exists && cm.Data[ConfigFile] != ""
		return ctrl.Result{}, nil
	}
	if _, err := r.apply(ctx, existing(exists, cm), desiredConfigMap(t, s.configYAML, s.configHash), "configmap"); err != nil {
		return ctrl.Result{}, err
	}
	s.hasConfigMap = true
	return ctrl.Result{}, nil
}

// existing is obj when it exists, else nil: what objectWriter.apply
// compares with.
func existing(exists bool, obj client.Object) client.Object {
	if !exists {
		return nil
	}
	return obj
}

// recordConfiguration notes, in the operator's metrics, the generation
// whose configuration was compiled and written.
func (r *TenantConfigurationReconciler) recordConfiguration(_ context.Context, s *configurationScope) (ctrl.Result, error) {
	if s.configYAML != nil {
		configurationGeneration.WithLabelValues(s.tenant.Namespace, s.tenant.Name).Set(float64(s.tenant.Generation))
	}
	return ctrl.Result{}, nil
}

// compiledObjects lists the objects of in, in the order compiled.
func compiledObjects(in workspace.Input) []v1alpha1.CompiledObject {
	var out []v1alpha1.CompiledObject
	for i := range in.Connections {
		c := &in.Connections[i]
		o := v1alpha1.CompiledObject{Kind: "Connection", Name: c.Name, Generation: c.Generation}
		if at := workspace.CredentialsRotatedAt(in.Secrets[c.CredentialsSecretName()]); at != nil {
			t := metav1.NewTime(*at)
			o.CredentialsRotatedAt = &t
		}
		out = append(out, o)
	}
	for _, g := range in.Grants {
		out = append(out, v1alpha1.CompiledObject{Kind: "Grant", Name: g.Name, Generation: g.Generation})
	}
	for _, p := range in.OwnershipPolicies {
		out = append(out, v1alpha1.CompiledObject{Kind: "OwnershipPolicy", Name: p.Name, Generation: p.Generation})
	}
	return out
}

// MarshalWorkspace writes a workspace configuration as the YAML document
// the bus reads.
func MarshalWorkspace(w *config.Workspace) ([]byte, error) {
	b, err := yaml.Marshal(w)
	if err != nil {
		return nil, err
	}
	return append([]byte("# Generated by the storybus operator from the Tenant and the objects that refer to it. Edits are overwritten.\n"), b...), nil
}

// workspaceDocument is Tenant t's configuration document, the YAML of its
// workspace w (MarshalWorkspace) followed by a line naming the hash of
// what comes before it, so that a bus pod reports the same hash whatever
// the bytes of the file it reads; and that hash. Most compiles find the
// workspace the compile before them did, whose document the Tenant's
// ConfigMap holds: it is read back from the cache, not converted to YAML
// again (the conversion was two thirds of a compile's time) nor kept a
// second time in memory (a few KiB per Tenant). A ConfigMap that does
// not hold it (not written yet, still holding an earlier workspace's
// document, or changed by hand) has the workspace converted again.
func (r *TenantConfigurationReconciler) workspaceDocument(ctx context.Context, t *v1alpha1.Tenant, w *config.Workspace) (doc []byte, hash string, err error) {
	sum, err := workspaceDigest(w)
	if err != nil {
		return nil, "", err
	}
	key := client.ObjectKeyFromObject(t)
	if hash, ok := compiled.lookup(key, sum); ok {
		if doc := r.documentInConfigMap(ctx, t, hash); doc != nil {
			return doc, hash, nil
		}
	}
	b, err := MarshalWorkspace(w)
	if err != nil {
		return nil, "", err
	}
	hash = ConfigHash(b)
	compiled.remember(key, sum, hash)
	return append(b, configHashLine(hash)...), hash, nil
}

// workspaceDigest is the digest of w that compiled remembers: two
// workspaces of one digest have one document.
func workspaceDigest(w *config.Workspace) ([sha256.Size]byte, error) {
	j, err := json.Marshal(w)
	if err != nil {
		return [sha256.Size]byte{}, err
	}
	return sha256.Sum256(j), nil
}

// documentInConfigMap is the configuration document of hash, its
// configHash line included, as Tenant t's ConfigMap in the cache holds
// it; nil when the ConfigMap holds another document or cannot be read.
func (r *TenantConfigurationReconciler) documentInConfigMap(ctx context.Context, t *v1alpha1.Tenant, hash string) []byte {
	cm := &corev1.ConfigMap{}
	if err := r.Get(ctx, types.NamespacedName{Namespace: t.Namespace, Name: configMapName(t)}, cm, client.UnsafeDisableDeepCopy); err != nil {
		return nil
	}
	doc := cm.Data[ConfigFile]
	body, ok := strings.CutSuffix(doc, configHashLine(hash))
	if !ok || ConfigHash([]byte(body)) != hash {
		return nil
	}
	return []byte(doc)
}

// configHashLine is the last line of a Tenant's configuration document,
// which names the hash of the lines before it.
func configHashLine(hash string) string { return "configHash: " + hash + "\n" }

// compiled remembers, for each Tenant, the digest of the workspace last
// converted to YAML and the hash of its document.
var compiled = &compiledDigests{last: map[types.NamespacedName]compiledDigest{}}

// compiledDigests is the memory behind compiled.
type compiledDigests struct {
	mu   sync.Mutex
	last map[types.NamespacedName]compiledDigest
}

// compiledDigest is a workspace's JSON digest and its document's hash.
type compiledDigest struct {
	sum  [sha256.Size]byte
	hash string
}

// lookup returns the hash of the document of the workspace whose digest
// is sum, when it is the one last converted for key.
func (m *compiledDigests) lookup(key types.NamespacedName, sum [sha256.Size]byte) (string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	last, ok := m.last[key]
	return last.hash, ok && last.sum == sum
}

// remember notes that the workspace of digest sum was converted for key
// into the document of hash.
func (m *compiledDigests) remember(key types.NamespacedName, sum [sha256.Size]byte, hash string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.last) >= eventMemoObjects {
		m.last = map[types.NamespacedName]compiledDigest{}
	}
	m.last[key] = compiledDigest{sum: sum, hash: hash}
}

// ConfigHash is the hash of a configuration document as the operator
// annotates it and the bus reports it (config.DocumentHash).
func ConfigHash(b []byte) string { return config.DocumentHash(b) }

// randomHex returns n random bytes, hex-encoded.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return hex.EncodeToString(b)
}

// SetupWithManager registers the reconciler and its watches: the Tenant's
// spec, the objects compiled into its configuration (their specs; a
// Connection's credentials through its Secret), and the ConfigMap and
// Secret it writes.
func (r *TenantConfigurationReconciler) SetupWithManager(mgr ctrl.Manager) error {
	// The objects compiled into the configuration come in bursts (a
	// Tenant's Connections and Grants, their Secrets): one compile serves
	// a burst, whatever kinds it touches.
	burst := newCoalescer(coalesce, coalesceQuiet, coalesceAtMost)
	return r.Secrets.Watch(ctrl.NewControllerManagedBy(mgr).Named("tenant-configuration"), r.connectionSecretToTenants, burst).
		// A Tenant's creation joins the burst of its Connections and Grants
		// (and the start's first list, a burst of its own); a change of its
		// spec compiles at once.
		For(&v1alpha1.Tenant{}, builder.WithPredicates(tenantSpecChanged, predicate.Funcs{CreateFunc: func(event.CreateEvent) bool { return false }})).
		Watches(&v1alpha1.Tenant{}, coalesced(burst, func(_ context.Context, o client.Object) []reconcile.Request {
			return requestsFor(o.GetNamespace(), o.GetName())
		}), builder.WithPredicates(predicate.Funcs{
			UpdateFunc:  func(event.UpdateEvent) bool { return false },
			DeleteFunc:  func(event.DeleteEvent) bool { return false },
			GenericFunc: func(event.GenericEvent) bool { return false },
		})).
		Owns(&corev1.ConfigMap{}).
		Owns(&corev1.Secret{}).
		// A Connection's status writes cannot change the configuration:
		// its credentials and their rotation time come through the Secret
		// watch.
		Watches(&v1alpha1.Connection{}, coalesced(burst, func(_ context.Context, o client.Object) []reconcile.Request {
			return requestsFor(o.GetNamespace(), o.(*v1alpha1.Connection).Spec.TenantRef.Name)
		}), builder.WithPredicates(specChanged)).
		Watches(&v1alpha1.OwnershipPolicy{}, coalesced(burst, func(_ context.Context, o client.Object) []reconcile.Request {
			return requestsFor(o.GetNamespace(), o.(*v1alpha1.OwnershipPolicy).Spec.TenantRef.Name)
		}), builder.WithPredicates(specChanged)).
		Watches(&v1alpha1.Grant{}, coalesced(burst, r.grantToTenant), builder.WithPredicates(specChanged)).
		Complete(observed{kind: "Tenant", inner: r})
}

func (r *TenantConfigurationReconciler) grantToTenant(ctx context.Context, o client.Object) []reconcile.Request {
	g := o.(*v1alpha1.Grant)
	c := &v1alpha1.Connection{}
	if err := r.Get(ctx, types.NamespacedName{Namespace: g.Namespace, Name: g.Spec.ConnectionRef.Name}, c); err != nil {
		return nil
	}
	return requestsFor(g.Namespace, c.Spec.TenantRef.Name)
}

// connectionSecretToTenants maps a Secret to the Tenants of the
// Connections that read it.
func (r *TenantConfigurationReconciler) connectionSecretToTenants(ctx context.Context, o client.Object) []reconcile.Request {
	conns, err := connectionsReadingSecret(ctx, r.Client, o.GetNamespace(), o.GetName())
	if err != nil {
		return nil
	}
	var names []string
	for _, c := range conns {
		names = append(names, c.Spec.TenantRef.Name)
	}
	return requestsFor(o.GetNamespace(), names...)
}
