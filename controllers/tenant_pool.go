package controllers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	config "github.com/storybus/storybus/api/config/v1alpha1"
	"github.com/storybus/storybus/api/v1alpha1"
	"github.com/storybus/storybus/bus/pool"
	"github.com/storybus/storybus/bus/store"
)

// TenantPoolReconciler places a pooled Tenant's workspace on its BusPool:
// it writes the compiled configuration of the Tenant's ConfigMap, with the
// signing key and secret access keys of its Secret inline, and its own key
// pair with the host names it may claim (tenant_pool_tls.go), into the
// pool's documents bucket under the workspace id, and decides the Tenant's
// readiness from what the pool's ready replicas report in the status
// bucket. It owns PoolReady and status.pool, and, for a pooled Tenant, the
// readiness part of the status (Available, ConfigurationLoaded, Ready, the
// replica and endpoint fields) that the readiness controller writes for a
// bus of its own. A Tenant moved off a pool, or deleted, has its document
// removed there first; a deleted one's data on the pool's cluster follows
// its deletionPolicy.
type TenantPoolReconciler struct {
	client.Client
	// APIReader reads what the cache does not hold: a namespace's labels
	// when the operator does not watch namespaces.
	APIReader client.Reader
	// Secrets reads Secrets (the pools' NATS credentials).
	Secrets *Secrets
	// Recorder records Events on the Tenant.
	Recorder events.EventRecorder
	// Pools holds the connections to the pools' clusters.
	Pools *poolClients
	Options

	// referenceGrants is true when the cluster served ReferenceGrant at
	// setup: a pooled Tenant's HTTPRoute in another namespace than its
	// pool's then gets one (tenant_pool_expose.go).
	referenceGrants bool
}

// poolStatus is the part of a Tenant's status the pool controller owns
// for every Tenant: PoolReady and status.pool. Both are absent on a
// Tenant that is on no pool.
var poolStatus = tenantStatusPart{
	manager: FieldManager + "-pool",
	owns:    ofTypes(v1alpha1.ConditionPoolReady),
	fields:  []string{"pool"},
}

// poolScope is what the phases of one reconcile share.
type poolScope struct {
	tenant *v1alpha1.Tenant
	// pool is the BusPool spec.pool names; nil when there is none.
	pool *v1alpha1.BusPool
	// client is the pool's connection.
	client *poolClient
	// placed is the PoolReady condition the phases decided; nil when they
	// decided none (an API error before).
	placed *metav1.Condition
	// configHash is the configuration of the document in the pool (the
	// ConfigMap's), docHash the document's own hash.
	configHash, docHash string
	// pods are the pool's replica pods; statuses what each replica
	// reports for the workspace, once synced.
	pods     []corev1.Pod
	statuses map[string]pool.Status
	synced   bool
	// observed is true once the replicas were read.
	observed bool
	// requeue asks to look again after a while (a cluster unreachable, a
	// Secret the cache has not caught up with).
	requeue time.Duration
}

// errPhasesDone stops a reconcile's phases with nothing more to do until a
// watched object changes; it is not an error.
var errPhasesDone = errors.New("nothing more to do until something changes")

// poolRecheck is how often a pooled Tenant whose configuration is not yet
// in force on every ready replica is looked at again, besides the status
// bucket's events.
const poolRecheck = 5 * time.Second

// poolWaitNamed is how long a pooled Tenant's ConfigurationLoaded stays
// False before it names the ready replicas that do not serve its
// document: replicas take a document up within a second or so, and one
// that has not after this is worth naming.
const poolWaitNamed = 30 * time.Second

// waitedLong reports whether the Tenant's ConfigurationLoaded has been
// False for longer than poolWaitNamed at now.
func (s *poolScope) waitedLong(now time.Time) bool {
	c := meta.FindStatusCondition(s.tenant.Status.Conditions, v1alpha1.ConditionConfigurationLoaded)
	return c != nil && c.Status == metav1.ConditionFalse && now.Sub(c.LastTransitionTime.Time) > poolWaitNamed
}

// poolLeaveTimeout bounds how long a deletion waits for the ready
// replicas to report that they stopped serving the workspace before it
// deletes the workspace's data.
const poolLeaveTimeout = 30 * time.Second

// +kubebuilder:rbac:groups=bus.storybus.io,resources=tenants,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=bus.storybus.io,resources=tenants/status,verbs=get;patch
// +kubebuilder:rbac:groups=bus.storybus.io,resources=tenants/finalizers,verbs=update
// +kubebuilder:rbac:groups=bus.storybus.io,resources=buspools,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch

// Reconcile places one Tenant's workspace on its pool, or takes it off.
func (r *TenantPoolReconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, err error) {
	t := &v1alpha1.Tenant{}
	if err := r.Get(ctx, req.NamespacedName, t); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !t.DeletionTimestamp.IsZero() {
		return r.finalize(ctx, t)
	}
	before := t.DeepCopy()
	poolNS, poolName, pooled := t.PoolKey()
	want := types.NamespacedName{Namespace: poolNS, Name: poolName}
	if pl := t.Status.Pool; pl != nil && (!pooled || pl.Namespace != poolNS || pl.Name != poolName) {
		if err := r.leave(ctx, t, pl); err != nil {
			return ctrl.Result{}, errors.Join(err, poolStatus.write(ctx, r.Client, r.Recorder, t, before))
		}
	}
	if !pooled {
		meta.RemoveStatusCondition(&t.Status.Conditions, v1alpha1.ConditionPoolReady)
		if err := poolStatus.write(ctx, r.Client, r.Recorder, t, before); err != nil {
			return ctrl.Result{}, err
		}
		return ctrl.Result{}, r.removeFinalizer(ctx, t)
	}
	s := &poolScope{tenant: t}
	defer func() {
		s.setStatus(r.ClusterDomain)
		err = errors.Join(err, poolStatus.write(ctx, r.Client, r.Recorder, t, before))
		if !configurationDecided(t) {
			return
		}
		if held := readinessHeld(t, before, time.Now()); held > 0 {
			res = lowestNonZeroResult(res, requeueAfter(held))
			return
		}
		err = errors.Join(err, readinessStatus.write(ctx, r.Client, r.Recorder, t, before))
	}()
	res, err = doReconcile(ctx, s,
		func(ctx context.Context, s *poolScope) (ctrl.Result, error) { return r.findPool(ctx, s, want) },
		r.admit,
		r.claim,
		r.dropFront,
		r.place,
		r.front,
	)
	if errors.Is(err, errPhasesDone) {
		err = nil
	}
	if s.pool != nil && s.placed != nil && (s.placed.Reason == v1alpha1.ReasonNamespaceNotAllowed || s.placed.Reason == v1alpha1.ReasonWorkspaceConflict) {
		// Admission revoked, or the workspace id held by another
		// Tenant: nothing of this one routes to the pool any more.
		err = errors.Join(err, r.deleteFront(ctx, s.pool, t))
	}
	if s.requeue > 0 {
		res = lowestNonZeroResult(res, requeueAfter(s.requeue))
	}
	return res, err
}

// notPlaced records why the workspace is not on its pool.
func (s *poolScope) notPlaced(reason, format string, args ...any) {
	c := cond(v1alpha1.ConditionPoolReady, metav1.ConditionFalse, reason, format, args...)
	s.placed = &c
}

func (r *TenantPoolReconciler) findPool(ctx context.Context, s *poolScope, key types.NamespacedName) (ctrl.Result, error) {
	p := &v1alpha1.BusPool{}
	switch err := r.Get(ctx, key, p); {
	case apierrors.IsNotFound(err):
		s.notPlaced(v1alpha1.ReasonPoolNotFound, "spec.pool names BusPool %s, which does not exist", key)
		return ctrl.Result{}, terminal(errors.New(s.placed.Message))
	case err != nil:
		return ctrl.Result{}, fmt.Errorf("get buspool %s: %w", key, err)
	case !p.DeletionTimestamp.IsZero():
		s.notPlaced(v1alpha1.ReasonPoolNotFound, "BusPool %s is being deleted", key)
		return ctrl.Result{}, errPhasesDone
	}
	s.pool = p
	return ctrl.Result{}, nil
}

// admit checks that the pool's spec.allowedTenants admits the Tenant's
// namespace.
func (r *TenantPoolReconciler) admit(ctx context.Context, s *poolScope) (ctrl.Result, error) {
	ok, why, err := r.admits(ctx, s.pool, s.tenant.Namespace)
	if err != nil {
		return ctrl.Result{}, err
	}
	if !ok {
		s.notPlaced(v1alpha1.ReasonNamespaceNotAllowed, "BusPool %s/%s does not admit Tenants of namespace %s: %s",
			s.pool.Namespace, s.pool.Name, s.tenant.Namespace, why)
		return ctrl.Result{}, terminal(errors.New(s.placed.Message))
	}
	return ctrl.Result{}, nil
}

// admits reports whether pool p admits Tenants of namespace ns, and when
// it does not, why.
func (r *TenantPoolReconciler) admits(ctx context.Context, p *v1alpha1.BusPool, ns string) (bool, string, error) {
	allowed := p.EffectiveAllowedNamespaces()
	switch allowed.From {
	case v1alpha1.NamespacesFromAll:
		return true, "", nil
	case v1alpha1.NamespacesFromSelector:
		sel, err := metav1.LabelSelectorAsSelector(allowed.Selector)
		if err != nil {
			return false, fmt.Sprintf("its spec.allowedTenants.namespaces.selector is invalid: %v", err), nil
		}
		md := &metav1.PartialObjectMetadata{}
		md.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
		reader := r.APIReader
		if len(r.WatchNamespaces) == 0 {
			reader = r.Client
		}
		if err := reader.Get(ctx, types.NamespacedName{Name: ns}, md); err != nil {
			return false, "", fmt.Errorf("read the labels of namespace %s: %w", ns, err)
		}
		if sel.Matches(labels.Set(md.Labels)) {
			return true, "", nil
		}
		return false, fmt.Sprintf("its labels do not match spec.allowedTenants.namespaces.selector (%s)", sel), nil
	}
	if ns == p.Namespace {
		return true, "", nil
	}
	return false, "spec.allowedTenants.namespaces.from is Same: only Tenants of the pool's own namespace", nil
}

// claim stops the reconcile when another Tenant holds the workspace id on
// the pool: the id is the key of the pool's bucket and names the
// workspace's stream on its cluster. It is decided as on an external
// cluster (workspaceClaim): a Tenant already placed keeps it; among the
// others, the oldest.
func (r *TenantPoolReconciler) claim(ctx context.Context, s *poolScope) (ctrl.Result, error) {
	t := s.tenant
	key := types.NamespacedName{Namespace: s.pool.Namespace, Name: s.pool.Name}
	var l v1alpha1.TenantList
	if err := r.List(ctx, &l, client.MatchingFields{indexPoolWorkspace: poolWorkspaceKey(key, t.EffectiveWorkspaceID())}); err != nil {
		return ctrl.Result{}, fmt.Errorf("list the tenants of workspace %s: %w", t.EffectiveWorkspaceID(), err)
	}
	var others []claimant
	for i := range l.Items {
		o := &l.Items[i]
		if o.UID == t.UID || o.EffectiveWorkspaceID() != t.EffectiveWorkspaceID() {
			continue
		}
		ns, name, ok := o.PoolKey()
		if !ok || ns != key.Namespace || name != key.Name {
			// Leaving the pool: it holds the key until it has left.
			if !placedOn(o, key) {
				continue
			}
		}
		others = append(others, claimant{tenant: o, serving: placedOn(o, key)})
	}
	// A bus of its own on external storage with the same id on the
	// pool's cluster would share the workspace's stream and buckets.
	external, err := externalRivals(ctx, r.Client, t, s.pool.Spec.NATS.URL)
	if err != nil {
		return ctrl.Result{}, err
	}
	others = append(others, external...)
	holder, stop := workspaceClaim(claimant{tenant: t, serving: placedOn(t, key)}, others)
	if holder == nil {
		return ctrl.Result{}, nil
	}
	switch {
	case stop && holder.Spec.Pool == nil:
		// A bus of its own holds the workspace on the cluster: the
		// document goes, so that no replica serves it beside that bus.
		if err := r.leave(ctx, t, t.Status.Pool); err != nil {
			return ctrl.Result{}, err
		}
	case stop:
		// Both wrote the key; the holder's next reconcile writes its
		// document again.
		t.Status.Pool = nil
	}
	where := "BusPool " + key.String()
	if holder.Spec.Pool == nil {
		where += "'s cluster, by a bus of its own,"
	}
	s.notPlaced(v1alpha1.ReasonWorkspaceConflict, "workspace %s on %s is held by Tenant %s/%s; give this Tenant another spec.workspaceID",
		t.EffectiveWorkspaceID(), where, holder.Namespace, holder.Name)
	return ctrl.Result{}, terminal(errors.New(s.placed.Message))
}

// placedOn reports whether t's document is in pool key's bucket.
func placedOn(t *v1alpha1.Tenant, key types.NamespacedName) bool {
	pl := t.Status.Pool
	return pl != nil && pl.Namespace == key.Namespace && pl.Name == key.Name
}

// place writes the workspace's document into the pool's bucket, unless it
// is there already.
func (r *TenantPoolReconciler) place(ctx context.Context, s *poolScope) (ctrl.Result, error) {
	t := s.tenant
	if t.Status.ConfigHash == "" {
		if held := progressHeld(t, time.Now()); held > 0 && meta.FindStatusCondition(t.Status.Conditions, v1alpha1.ConditionPoolReady) == nil {
			// A new Tenant's first compile waits for its Connections'
			// credentials (progressHeld), and its compile reconciles
			// it again: PoolReady is first written then, Placed, not
			// AwaitingConfiguration and then Placed.
			s.requeue = held
			return ctrl.Result{}, errPhasesDone
		}
		s.notPlaced(v1alpha1.ReasonAwaitingConfiguration, "the workspace is placed on BusPool %s/%s once the Tenant has a valid configuration", s.pool.Namespace, s.pool.Name)
		return ctrl.Result{}, errPhasesDone
	}
	pair, note, err := r.keyPair(ctx, s)
	switch {
	case isNoKeyPair(err):
		s.notPlaced(v1alpha1.ReasonKeyPairNotServed, "the workspace is placed on BusPool %s/%s once %v", s.pool.Namespace, s.pool.Name, err)
		return ctrl.Result{}, errPhasesDone
	case err != nil:
		return ctrl.Result{}, err
	}
	doc, configHash, err := r.document(ctx, t, pair)
	switch {
	case errors.Is(err, errPhasesDone):
		// The cache has not caught up with the configuration
		// controller's writes (its Secret, then its ConfigMap).
		s.requeue = time.Second
		return ctrl.Result{}, err
	case errors.Is(err, reconcile.TerminalError(nil)):
		s.notPlaced(v1alpha1.ReasonPoolWriteFailed, "%v", err)
		return ctrl.Result{}, err
	case err != nil:
		return ctrl.Result{}, err
	}
	if err := r.addFinalizer(ctx, t); err != nil {
		return ctrl.Result{}, err
	}
	var clientErr error
	if s.client, clientErr = r.Pools.forPool(ctx, r.Secrets, s.pool); clientErr != nil {
		s.notPlaced(v1alpha1.ReasonPoolUnreachable, "BusPool %s/%s: %v", s.pool.Namespace, s.pool.Name, clientErr)
		s.requeue = clusterRecheck
		return ctrl.Result{}, errPhasesDone
	}
	key := types.NamespacedName{Namespace: s.pool.Namespace, Name: s.pool.Name}
	if err := r.observe(ctx, s); err != nil {
		return ctrl.Result{}, err
	}
	hash := config.DocumentHash(doc)
	// The bucket is read, and written, only when the document is not known
	// to be there: placed before, and seen by a replica (a key deleted
	// behind the operator's back is not), or no replica is ready to say.
	placed := placedOn(t, key)
	known := placed && t.Status.Pool.DocumentHash == hash &&
		(!s.synced || len(s.loads()) == 0 || reported(s.statuses, hash))
	if !placed && r.openStore(ctx, s.client, doc) {
		// From here the workspace has data on the pool's cluster: it is
		// placed there, its document hash empty until the put below. A
		// put that fails leaves it so, and a Tenant deleted before a
		// later reconcile puts the document still has its deletion
		// policy applied to that data.
		t.Status.Pool = &v1alpha1.PoolPlacement{Namespace: key.Namespace, Name: key.Name}
	}
	if !known {
		if err := r.put(ctx, s.client, t.EffectiveWorkspaceID(), doc); err != nil {
			s.notPlaced(v1alpha1.ReasonPoolUnreachable, "BusPool %s: %v", key, err)
			return ctrl.Result{}, err
		}
	}
	t.Status.Pool = &v1alpha1.PoolPlacement{Namespace: key.Namespace, Name: key.Name, DocumentHash: hash}
	if pair != nil {
		t.Status.Pool.HostNames = pair.Hosts
	}
	s.configHash, s.docHash = configHash, hash
	c := cond(v1alpha1.ConditionPoolReady, metav1.ConditionTrue, v1alpha1.ReasonPlaced,
		"configuration %s of workspace %s is in BusPool %s (document %s)%s", configHash, t.EffectiveWorkspaceID(), key, hash, note)
	s.placed = &c
	return ctrl.Result{}, nil
}

// reported reports whether a replica reports document hash, in force or
// refused: then the document is in the bucket.
func reported(statuses map[string]pool.Status, hash string) bool {
	for _, st := range statuses {
		if st.Hash == hash || st.Refused == hash {
			return true
		}
	}
	return false
}

// openStore opens, before a workspace is first placed on a pool, its
// stream and records on the pool's cluster (doc's), as each replica opens
// them when it applies the document. Every replica of a pool applies a new
// document at once, and nats-server often answers none of several
// creates of one replicated stream at the same time, though it creates
// it: each replica then waited out its first attempt (half a second) of
// an onboarding's two. Opened first, the replicas find the stream there.
// A failure is left to the replicas, which open it themselves and report
// what keeps them from it on the Tenant. It reports whether it opened
// them.
func (r *TenantPoolReconciler) openStore(ctx context.Context, pc *poolClient, doc []byte) bool {
	cfg, err := config.Parse(doc)
	if err != nil {
		return false // the replicas refuse it, and say why
	}
	ctx, cancel := context.WithTimeout(ctx, externalDataTimeout)
	defer cancel()
	// The operator runs a pool's replicas without --topic-retention
	// (poolArgs): their default is 0, the document's maxAge alone.
	if _, err := pc.store.OpenConfigured(ctx, cfg, 0); err != nil {
		ctrl.LoggerFrom(ctx).Info("could not open the workspace's stream before its first placement; the pool's replicas open it", "workspace", cfg.ID, "error", err.Error())
		return false
	}
	return true
}

// put writes doc under ws into the pool's bucket unless the bucket holds
// those very bytes.
func (r *TenantPoolReconciler) put(ctx context.Context, pc *poolClient, ws string, doc []byte) error {
	ctx, cancel := context.WithTimeout(ctx, externalDataTimeout)
	defer cancel()
	e, err := pc.pool.Documents.Get(ctx, ws)
	switch {
	case err == nil && bytes.Equal(e.Value(), doc):
		return nil
	case err != nil && !errors.Is(err, jetstream.ErrKeyNotFound):
		return fmt.Errorf("read workspace %s's document: %w", ws, err)
	}
	if _, err := pc.pool.Documents.Put(ctx, ws, doc); err != nil {
		return fmt.Errorf("put workspace %s's document: %w", ws, err)
	}
	return nil
}

// document is the pool document of t's compiled configuration: the
// ConfigMap's, with the signing key and the secret access keys of the
// Tenant's Secret inline (the files a bus of its own reads from its
// mounted volume). It returns the document and the configuration hash it
// was compiled as. A document the cache cannot complete yet (the Secret
// behind the ConfigMap) is errPhasesDone.
func (r *TenantPoolReconciler) document(ctx context.Context, t *v1alpha1.Tenant, pair *config.WorkspaceTLS) ([]byte, string, error) {
	cm := &corev1.ConfigMap{}
	if err := r.Get(ctx, types.NamespacedName{Namespace: t.Namespace, Name: configMapName(t)}, cm); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, "", errPhasesDone
		}
		return nil, "", fmt.Errorf("get configmap %s: %w", configMapName(t), err)
	}
	sec := &corev1.Secret{}
	if err := r.Get(ctx, types.NamespacedName{Namespace: t.Namespace, Name: signingKeyName(t)}, sec); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, "", errPhasesDone
		}
		return nil, "", fmt.Errorf("get secret %s: %w", signingKeyName(t), err)
	}
	if !controlledBy(cm, t) || !controlledBy(sec, t) {
		return nil, "", errPhasesDone
	}
	from := poolDocumentInputs{configMap: cm.ResourceVersion, secret: sec.ResourceVersion, pair: pair}
	key := client.ObjectKeyFromObject(t)
	if doc, hash, ok := poolDocuments.lookup(key, from); ok {
		return doc, hash, nil
	}
	doc, hash, err := poolDocument([]byte(cm.Data[ConfigFile]), sec.Data, pair)
	if err == nil {
		poolDocuments.remember(key, from, doc, hash)
	}
	return doc, hash, err
}

// poolDocuments remembers the document last made for each pooled Tenant,
// and what it was made from: most of a Tenant's pool reconciles (its
// pool's replicas reporting, its readiness) find the ConfigMap and the
// Secret as they were, and parsing the configuration file again for
// each was a twentieth of the operator's CPU with 500 Tenants on a pool.
var poolDocuments = &poolDocumentMemo{last: map[types.NamespacedName]poolDocumentMade{}}

// poolDocumentMemo is the memory behind poolDocuments.
type poolDocumentMemo struct {
	mu   sync.Mutex
	last map[types.NamespacedName]poolDocumentMade
}

// poolDocumentInputs is what a pool document is made from: the
// resourceVersions of the Tenant's ConfigMap and Secret, and its key
// pair.
type poolDocumentInputs struct {
	configMap, secret string
	pair              *config.WorkspaceTLS
}

// same reports whether i and o make the same document.
func (i poolDocumentInputs) same(o poolDocumentInputs) bool {
	if i.configMap != o.configMap || i.secret != o.secret || (i.pair == nil) != (o.pair == nil) {
		return false
	}
	return i.pair == nil || (i.pair.Certificate == o.pair.Certificate && i.pair.Key == o.pair.Key && slices.Equal(i.pair.Hosts, o.pair.Hosts))
}

// poolDocumentMade is a document, its configuration hash, and what it was
// made from.
type poolDocumentMade struct {
	from poolDocumentInputs
	doc  []byte
	hash string
}

// lookup returns Tenant key's document if it was made from from.
func (m *poolDocumentMemo) lookup(key types.NamespacedName, from poolDocumentInputs) ([]byte, string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	made, ok := m.last[key]
	if !ok || !made.from.same(from) {
		return nil, "", false
	}
	return slices.Clone(made.doc), made.hash, true
}

// remember keeps Tenant key's document doc, made from from.
func (m *poolDocumentMemo) remember(key types.NamespacedName, from poolDocumentInputs, doc []byte, hash string) {
	if from.pair != nil {
		pair := *from.pair
		pair.Hosts = slices.Clone(pair.Hosts)
		from.pair = &pair
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.last) >= eventMemoObjects {
		m.last = map[types.NamespacedName]poolDocumentMade{}
	}
	m.last[key] = poolDocumentMade{from: from, doc: slices.Clone(doc), hash: hash}
}

// forget drops what m remembers of Tenant key.
func (m *poolDocumentMemo) forget(key types.NamespacedName) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.last, key)
}

// poolDocument turns a compiled configuration file and the files of the
// Tenant's Secret it names (by key) into the pool's document: the files'
// contents inline, so that a replica needs nothing but the document, and
// the workspace's own key pair, if any.
func poolDocument(file []byte, files map[string][]byte, pair *config.WorkspaceTLS) ([]byte, string, error) {
	w, err := config.Decode(file)
	if err != nil {
		return nil, "", fmt.Errorf("the ConfigMap's configuration: %w", err)
	}
	w.TLS = pair
	inline := func(path string) (string, bool) {
		name, ok := strings.CutPrefix(path, ConfigDir+"/")
		b, found := files[name]
		return strings.TrimSpace(string(b)), ok && found
	}
	if w.SigningKeyFile != "" {
		key, ok := inline(w.SigningKeyFile)
		if !ok {
			return nil, "", errPhasesDone
		}
		w.SigningKey, w.SigningKeyFile = key, ""
	}
	for i := range w.Connections {
		iam := w.Connections[i].IAM
		if iam == nil || iam.SecretAccessKeyFile == "" {
			continue
		}
		key, ok := inline(iam.SecretAccessKeyFile)
		if !ok {
			return nil, "", errPhasesDone
		}
		iam.SecretAccessKey, iam.SecretAccessKeyFile = key, ""
	}
	if err := w.Validate(); err != nil {
		return nil, "", terminal(fmt.Errorf("workspace %s's document: %w", w.ID, err))
	}
	b, err := json.Marshal(w)
	if err != nil {
		return nil, "", err
	}
	if len(b) > pool.MaxDocumentBytes {
		return nil, "", terminal(fmt.Errorf("workspace %s's document is %d bytes, over a pool's %d", w.ID, len(b), pool.MaxDocumentBytes))
	}
	return b, w.Hash, nil
}

// observe reads the pool's replica pods and what the replicas report for
// the workspace.
func (r *TenantPoolReconciler) observe(ctx context.Context, s *poolScope) error {
	var pods corev1.PodList
	if err := r.List(ctx, &pods, client.InNamespace(s.pool.Namespace), client.MatchingLabels{LabelPool: s.pool.Name, LabelManagedBy: FieldManager}); err != nil {
		return fmt.Errorf("list pool pods: %w", err)
	}
	s.pods = pods.Items
	s.statuses, s.synced = s.client.statusesOf(s.tenant.EffectiveWorkspaceID())
	s.observed = true
	return nil
}

// replicaLoad is what one ready replica of the pool reports for the
// workspace.
type replicaLoad struct {
	replica string
	status  pool.Status
	found   bool
}

// loads returns what each ready replica reports, in name order.
func (s *poolScope) loads() []replicaLoad {
	var out []replicaLoad
	for i := range s.pods {
		p := &s.pods[i]
		if !podReady(p) {
			continue
		}
		st, ok := s.statuses[p.Name]
		out = append(out, replicaLoad{replica: p.Name, status: st, found: ok})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].replica < out[j].replica })
	return out
}

// setStatus writes what the reconcile decided: PoolReady and, once the
// replicas were read (or the workspace could not be placed), the readiness
// part.
func (s *poolScope) setStatus(clusterDomain string) {
	t := s.tenant
	if s.placed == nil {
		return
	}
	setCondition(t, *s.placed)
	if s.placed.Status == metav1.ConditionTrue && !s.observed {
		return
	}
	t.Status.WorkspaceID = t.EffectiveWorkspaceID()
	t.Status.Endpoint, t.Status.Replicas, t.Status.ReadyReplicas = "", 0, 0
	if s.pool != nil {
		t.Status.Endpoint = strings.TrimSuffix(poolEndpoint(s.pool, clusterDomain)+v1alpha1.TenantPathPrefix(t.EffectiveWorkspaceID()), "/")
		t.Status.Replicas = s.pool.EffectiveReplicas()
	}
	loads := s.loads()
	t.Status.ReadyReplicas = int32(len(loads))
	t.Status.LoadedConfigHash = ""
	available, loaded := s.readiness(loads, time.Now())
	if loaded.Status == metav1.ConditionTrue {
		t.Status.LoadedConfigHash = s.configHash
	}
	setCondition(t, available)
	setCondition(t, loaded)
	var current []metav1.Condition
	for _, c := range t.Status.Conditions {
		if c.ObservedGeneration == t.Generation {
			current = append(current, c)
		}
	}
	setCondition(t, summarize(current, v1alpha1.ConditionConfigurationValid, v1alpha1.ConditionPoolReady, v1alpha1.ConditionAvailable, v1alpha1.ConditionConfigurationLoaded))
	t.Status.ObservedGeneration = t.Generation
	if s.requeue == 0 && len(loads) > 0 && loaded.Status != metav1.ConditionTrue {
		// The status bucket's events say when a replica reports; this
		// only bounds a missed one. With no replica ready, the pods'
		// events reconcile again.
		s.requeue = poolRecheck
	}
}

// readiness is the Available and ConfigurationLoaded conditions of a
// pooled Tenant: whether a replica of its pool is ready, and whether every
// ready one serves the document placed. While the replicas take it up,
// the condition does not say which of them serve it: that changed with
// each replica's report, and every change of the Tenant's Ready message
// rewrote the status of its Connections and Grants not yet in force (their
// InForce names it), 20 writes per report for a Tenant of 10 of each. Only
// a document not in force poolWaitNamed after the condition went False
// names each replica that does not serve it.
func (s *poolScope) readiness(loads []replicaLoad, now time.Time) (available, loaded metav1.Condition) {
	if s.placed.Status != metav1.ConditionTrue {
		return cond(v1alpha1.ConditionAvailable, metav1.ConditionFalse, s.placed.Reason, "the workspace is not placed on its pool: %s", s.placed.Message),
			cond(v1alpha1.ConditionConfigurationLoaded, metav1.ConditionFalse, v1alpha1.ReasonConfigurationNotLoaded, "no replica serves the workspace: it is not placed on its pool")
	}
	key := s.pool.Namespace + "/" + s.pool.Name
	if len(loads) == 0 {
		return cond(v1alpha1.ConditionAvailable, metav1.ConditionFalse, v1alpha1.ReasonReplicasNotReady,
				"0/%d replicas of BusPool %s ready", s.pool.EffectiveReplicas(), key),
			cond(v1alpha1.ConditionConfigurationLoaded, metav1.ConditionFalse, v1alpha1.ReasonConfigurationNotLoaded,
				"no replica of BusPool %s is ready to serve configuration %s", key, s.configHash)
	}
	available = cond(v1alpha1.ConditionAvailable, metav1.ConditionTrue, v1alpha1.ReasonReplicasReady,
		"%d/%d replicas of BusPool %s ready at %s", len(loads), s.pool.EffectiveReplicas(), key, s.tenant.Status.Endpoint)
	if !s.synced {
		return available, cond(v1alpha1.ConditionConfigurationLoaded, metav1.ConditionFalse, v1alpha1.ReasonConfigurationNotLoaded,
			"the operator has not yet read what the replicas of BusPool %s report", key)
	}
	var refused, waiting []string
	for _, l := range loads {
		switch {
		case l.status.Hash == s.docHash:
		case l.status.Refused == s.docHash:
			refused = append(refused, fmt.Sprintf("replica %s refused it: %s", l.replica, l.status.Error))
		case !l.found:
			waiting = append(waiting, "replica "+l.replica+" does not serve the workspace yet")
		default:
			waiting = append(waiting, fmt.Sprintf("replica %s serves document %s", l.replica, l.status.Hash))
		}
	}
	switch {
	case len(refused) > 0:
		return available, cond(v1alpha1.ConditionConfigurationLoaded, metav1.ConditionFalse, v1alpha1.ReasonConfigurationRefused,
			"configuration %s: %s; a replica that refuses a document keeps serving the previous one", s.configHash, strings.Join(append(refused, waiting...), "; "))
	case len(waiting) > 0 && s.waitedLong(now):
		return available, cond(v1alpha1.ConditionConfigurationLoaded, metav1.ConditionFalse, v1alpha1.ReasonConfigurationNotLoaded,
			"configuration %s is not in force yet: %s", s.configHash, strings.Join(waiting, "; "))
	case len(waiting) > 0:
		return available, cond(v1alpha1.ConditionConfigurationLoaded, metav1.ConditionFalse, v1alpha1.ReasonConfigurationNotLoaded,
			"configuration %s is on its way to the %d ready replica(s) of BusPool %s", s.configHash, len(loads), key)
	}
	return available, cond(v1alpha1.ConditionConfigurationLoaded, metav1.ConditionTrue, v1alpha1.ReasonConfigurationLoaded,
		"every ready replica of BusPool %s (%d) serves configuration %s", key, len(loads), s.configHash)
}

// leave removes t's document from pool pl, where it no longer belongs,
// and clears status.pool. The workspace's stream and buckets stay on the
// pool's cluster. A pool that is gone holds nothing to remove.
func (r *TenantPoolReconciler) leave(ctx context.Context, t *v1alpha1.Tenant, pl *v1alpha1.PoolPlacement) error {
	p := &v1alpha1.BusPool{}
	switch err := r.Get(ctx, types.NamespacedName{Namespace: pl.Namespace, Name: pl.Name}, p); {
	case apierrors.IsNotFound(err):
		t.Status.Pool = nil
		return nil
	case err != nil:
		return fmt.Errorf("get buspool %s/%s: %w", pl.Namespace, pl.Name, err)
	}
	// Its route there goes first: it needs no answer of the cluster.
	if err := r.deleteFront(ctx, p, t); err != nil {
		return err
	}
	pc, err := r.Pools.forPool(ctx, r.Secrets, p)
	if err != nil {
		return fmt.Errorf("remove workspace %s from BusPool %s/%s: %w", t.EffectiveWorkspaceID(), pl.Namespace, pl.Name, err)
	}
	dctx, cancel := context.WithTimeout(ctx, externalDataTimeout)
	defer cancel()
	if err := pc.pool.Delete(dctx, t.EffectiveWorkspaceID()); err != nil {
		return err
	}
	r.Recorder.Eventf(t, nil, corev1.EventTypeNormal, "PoolLeft", "Update",
		"workspace %s removed from BusPool %s/%s; its stream and buckets stay on the pool's cluster", t.EffectiveWorkspaceID(), pl.Namespace, pl.Name)
	poolDocuments.forget(client.ObjectKeyFromObject(t))
	t.Status.Pool = nil
	return nil
}

// finalize removes a deleted Tenant's workspace from its pool, waits until
// the pool's ready replicas stopped serving it, applies the deletion policy
// to its stream and buckets on the pool's cluster, then lets it go.
func (r *TenantPoolReconciler) finalize(ctx context.Context, t *v1alpha1.Tenant) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(t, v1alpha1.PoolFinalizer) {
		return ctrl.Result{}, nil
	}
	pl := t.Status.Pool
	if pl == nil {
		return ctrl.Result{}, r.removeFinalizer(ctx, t)
	}
	ws := t.EffectiveWorkspaceID()
	p := &v1alpha1.BusPool{}
	switch err := r.Get(ctx, types.NamespacedName{Namespace: pl.Namespace, Name: pl.Name}, p); {
	case apierrors.IsNotFound(err):
		r.Recorder.Eventf(t, nil, corev1.EventTypeNormal, "DataRetained", "Delete",
			"BusPool %s/%s is gone: workspace %s's data on its cluster, if any, is kept", pl.Namespace, pl.Name, ws)
		return ctrl.Result{}, r.removeFinalizer(ctx, t)
	case err != nil:
		return ctrl.Result{}, fmt.Errorf("get buspool %s/%s: %w", pl.Namespace, pl.Name, err)
	}
	if err := r.deleteFront(ctx, p, t); err != nil {
		return ctrl.Result{}, err
	}
	pc, err := r.Pools.forPool(ctx, r.Secrets, p)
	if err != nil {
		r.Recorder.Eventf(t, nil, corev1.EventTypeWarning, "DataDeletionFailed", "Delete",
			"cannot remove workspace %s from BusPool %s/%s: %v; retrying", ws, pl.Namespace, pl.Name, err)
		return ctrl.Result{}, fmt.Errorf("remove the workspace from its pool: %w", err)
	}
	dctx, cancel := context.WithTimeout(ctx, externalDataTimeout)
	defer cancel()
	if err := pc.pool.Delete(dctx, ws); err != nil {
		return ctrl.Result{}, err
	}
	if serving := r.stillServing(ctx, p, pc, ws); len(serving) > 0 && time.Since(t.DeletionTimestamp.Time) < poolLeaveTimeout {
		// Each replica clears its status key once it stopped serving
		// the workspace: the status bucket's event reconciles again.
		return requeueAfter(poolLeaveTimeout / 10), nil
	}
	if t.EffectiveDeletionPolicy() == v1alpha1.DeletionPolicyDelete {
		deleted, err := store.DeleteWorkspace(dctx, pc.js, ws)
		if err != nil {
			return ctrl.Result{}, r.dataDeletionFailed(t, err)
		}
		r.Recorder.Eventf(t, nil, corev1.EventTypeNormal, "DataDeleted", "Delete",
			"deletionPolicy delete: deleted %v of workspace %s on BusPool %s/%s's cluster", deleted, ws, pl.Namespace, pl.Name)
	} else {
		r.Recorder.Eventf(t, nil, corev1.EventTypeNormal, "DataRetained", "Delete",
			"deletionPolicy retain: workspace %s's stream and buckets stay on BusPool %s/%s's cluster", ws, pl.Namespace, pl.Name)
	}
	return ctrl.Result{}, r.removeFinalizer(ctx, t)
}

// dataDeletionFailed records why the data could not be deleted, and how to
// let the Tenant go without it, and returns err.
func (r *TenantPoolReconciler) dataDeletionFailed(t *v1alpha1.Tenant, err error) error {
	r.Recorder.Eventf(t, nil, corev1.EventTypeWarning, "DataDeletionFailed", "Delete",
		"deletionPolicy delete: %v; retrying (set spec.deletionPolicy to retain to delete the Tenant and keep the data)", err)
	return fmt.Errorf("delete the workspace's data: %w", err)
}

// stillServing returns the ready replicas of p that still report
// workspace ws.
func (r *TenantPoolReconciler) stillServing(ctx context.Context, p *v1alpha1.BusPool, pc *poolClient, ws string) []string {
	var pods corev1.PodList
	if err := r.List(ctx, &pods, client.InNamespace(p.Namespace), client.MatchingLabels{LabelPool: p.Name, LabelManagedBy: FieldManager}); err != nil {
		return []string{"(pods unknown)"}
	}
	statuses, synced := pc.statusesOf(ws)
	if !synced {
		return []string{"(statuses unknown)"}
	}
	var out []string
	for i := range pods.Items {
		if _, ok := statuses[pods.Items[i].Name]; ok && podReady(&pods.Items[i]) {
			out = append(out, pods.Items[i].Name)
		}
	}
	return out
}

func (r *TenantPoolReconciler) addFinalizer(ctx context.Context, t *v1alpha1.Tenant) error {
	return addTenantFinalizer(ctx, r.Client, t, v1alpha1.PoolFinalizer, poolFinalizerOwner)
}

func (r *TenantPoolReconciler) removeFinalizer(ctx context.Context, t *v1alpha1.Tenant) error {
	poolDocuments.forget(client.ObjectKeyFromObject(t))
	if !controllerutil.ContainsFinalizer(t, v1alpha1.PoolFinalizer) {
		return nil
	}
	orig := t.DeepCopy()
	controllerutil.RemoveFinalizer(t, v1alpha1.PoolFinalizer)
	if err := r.Patch(ctx, t, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("remove the pool finalizer: %w", err)
	}
	return nil
}

// SetupWithManager registers the reconciler and its watches: the Tenant
// (its spec, the configuration compiled), its ConfigMap and Secret, the
// pool it names (its spec, its replica pods), the other Tenants of its
// workspace on the pool, the namespaces' labels, and every change the
// pool's replicas report in the status bucket.
func (r *TenantPoolReconciler) SetupWithManager(mgr ctrl.Manager) error {
	var err error
	if r.referenceGrants, err = referenceGrantsServed(mgr.GetRESTMapper()); err != nil {
		return err
	}
	hasPoolLabel := builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetLabels()[LabelPool] != "" }))
	// The Secrets holding pooled Tenants' own key pairs.
	b := r.Secrets.Watch(ctrl.NewControllerManagedBy(mgr), func(ctx context.Context, o client.Object) []reconcile.Request {
		return requestsFor(o.GetNamespace(), tenantsOfKeyPairSecret(ctx, r.Client, o)...)
	}, nil).
		Named("tenant-pool").
		For(&v1alpha1.Tenant{}, builder.WithPredicates(tenantReadinessChanged)).
		Owns(&corev1.ConfigMap{}).
		Owns(&corev1.Secret{}).
		Watches(&v1alpha1.BusPool{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			return r.tenantsOf(ctx, client.ObjectKeyFromObject(o), "")
		}), builder.WithPredicates(specChanged)).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			return r.tenantsOf(ctx, types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetLabels()[LabelPool]}, "")
		}), hasPoolLabel).
		Watches(&v1alpha1.Tenant{}, handler.EnqueueRequestsFromMapFunc(r.sameWorkspaceOnPool), builder.WithPredicates(tenantPlacementChanged)).
		Watches(&v1alpha1.Tenant{}, handler.EnqueueRequestsFromMapFunc(r.keyPairTenantsOnPool), builder.WithPredicates(tenantHostNamesChanged)).
		WatchesRawSource(source.Channel(r.Pools.tenantEvents, handler.TypedEnqueueRequestsFromMapFunc(func(ctx context.Context, ev poolEvent) []reconcile.Request {
			return r.tenantsOf(ctx, ev.pool, ev.workspace)
		})))
	// What a Tenant's own spec.expose has in its pool's namespace.
	b = b.Watches(&networkingv1.Ingress{}, handler.EnqueueRequestsFromMapFunc(tenantOfPoolObject))
	if r.referenceGrants {
		b = b.Watches(&gatewayv1.ReferenceGrant{}, handler.EnqueueRequestsFromMapFunc(tenantOfPoolObject))
	}
	if len(r.WatchNamespaces) == 0 {
		// A pool's selector admits namespaces by their labels. An operator
		// confined to namespaces cannot watch them: it reads a namespace's
		// labels when it places a Tenant of it.
		b = b.WatchesMetadata(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(r.pooledTenantsIn),
			builder.WithPredicates(predicate.LabelChangedPredicate{}))
	}
	return b.Complete(observed{kind: "Tenant", inner: r})
}

// tenantsOf maps a change of pool to the Tenants that name it or are
// placed on it: those of workspace ws, or all of them when ws is empty.
func (r *TenantPoolReconciler) tenantsOf(ctx context.Context, pool types.NamespacedName, ws string) []reconcile.Request {
	if pool.Name == "" {
		return nil
	}
	var l v1alpha1.TenantList
	field := client.MatchingFields{indexTenantPool: pool.String()}
	if ws != "" {
		field = client.MatchingFields{indexPoolWorkspace: poolWorkspaceKey(pool, ws)}
	}
	if err := r.List(ctx, &l, field); err != nil {
		return nil
	}
	out := make([]reconcile.Request, 0, len(l.Items))
	for _, t := range l.Items {
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&t)})
	}
	return out
}

// sameWorkspaceOnPool maps a Tenant to the other Tenants of its workspace
// on the pools it names or is on, so that one waiting on a conflict is
// reconciled when the holder changes or goes.
func (r *TenantPoolReconciler) sameWorkspaceOnPool(ctx context.Context, o client.Object) []reconcile.Request {
	t := o.(*v1alpha1.Tenant)
	out := otherTenantsOf(ctx, r.Client, t, indexPooledWorkspace)
	for _, k := range tenantPools(t) {
		for _, req := range r.tenantsOf(ctx, k, t.EffectiveWorkspaceID()) {
			if req.NamespacedName != client.ObjectKeyFromObject(t) {
				out = append(out, req)
			}
		}
	}
	return out
}

// pooledTenantsIn maps a namespace to its Tenants that name a pool.
func (r *TenantPoolReconciler) pooledTenantsIn(ctx context.Context, o client.Object) []reconcile.Request {
	var l v1alpha1.TenantList
	if err := r.List(ctx, &l, client.InNamespace(o.GetName())); err != nil {
		return nil
	}
	var out []reconcile.Request
	for _, t := range l.Items {
		if t.Spec.Pool != nil {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&t)})
		}
	}
	return out
}
