package controllers

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/yaml"

	"github.com/storybus/storybus/api/v1alpha1"
	"github.com/storybus/storybus/bus/config"
	"github.com/storybus/storybus/controllers/workspace"
)

// TenantReconciler runs a Tenant's bus and keeps its configuration current.
type TenantReconciler struct {
	client.Client
	// APIReader reads uncached (the volumes of a deleted Tenant).
	APIReader client.Reader
	// Secrets reads and watches Secrets.
	Secrets *Secrets
	// Recorder records Events on the Tenant.
	Recorder events.EventRecorder
	// Prober asks ready bus pods which configuration they serve; nil means
	// an HTTPConfigProber.
	Prober ConfigProber
	// Cache is the manager's cache, which the watches of cert-manager
	// Certificates and Prometheus Operator PodMonitors are added to once
	// they exist.
	Cache cache.Cache
	Options

	controller controller.Controller
	certWatch  kindWatch
	// podMonitorWatch watches PodMonitors once their CRD exists.
	podMonitorWatch kindWatch
	// gatewayAPI is true when the cluster served HTTPRoute at setup: the
	// route is then watched and written.
	gatewayAPI bool
}

// tenantScope is what the phases of one reconcile share.
type tenantScope struct {
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
	compileErr  error
	// conflict is an object in the way, not controlled by the Tenant.
	conflict error
	// workspaceConflict is an older Tenant using the workspace id on the
	// same external NATS cluster.
	workspaceConflict error
	// compiledFrom lists the objects the configuration was compiled from.
	compiledFrom []v1alpha1.CompiledObject
	// hasConfigMap is true when a valid configuration exists in the
	// ConfigMap (written now or before); the bus is created only then.
	hasConfigMap bool
	// sts is the StatefulSet as last observed; nil when not observed.
	sts *appsv1.StatefulSet
	// requeueAfter, when set, has the Tenant looked at again that soon
	// for something no watch reports.
	requeueAfter time.Duration
	// podsObserved is true when the pods phase ran: loads is what each
	// ready bus pod said it serves, problems why others are not ready.
	podsObserved bool
	loads        []podLoad
	problems     []string
	// expose is what the expose phase saw; nil when it did not run or the
	// Tenant has no spec.expose.
	expose *exposeObservation
}

// +kubebuilder:rbac:groups=bus.storybus.io,resources=tenants,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=bus.storybus.io,resources=tenants/status,verbs=get;patch
// +kubebuilder:rbac:groups=bus.storybus.io,resources=tenants/finalizers,verbs=update
// +kubebuilder:rbac:groups=apps,resources=statefulsets,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=services;configmaps,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get;list;delete
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch

// Reconcile brings one Tenant's bus to its spec.
func (r *TenantReconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, err error) {
	t := &v1alpha1.Tenant{}
	if err := r.Get(ctx, req.NamespacedName, t); err != nil {
		if apierrors.IsNotFound(err) {
			forgetTenantMetrics(req.NamespacedName)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("get tenant: %w", err)
	}
	if !t.DeletionTimestamp.IsZero() {
		return r.finalize(ctx, t)
	}
	if !controllerutil.ContainsFinalizer(t, v1alpha1.Finalizer) {
		orig := t.DeepCopy()
		controllerutil.AddFinalizer(t, v1alpha1.Finalizer)
		if err := r.Patch(ctx, t, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
			return ctrl.Result{}, fmt.Errorf("add finalizer: %w", err)
		}
	}

	before := t.DeepCopy()
	s := &tenantScope{tenant: t}
	defer func() {
		applyTenantStatus(t, observeTenant(s, r.ClusterDomain))
		applyExposeStatus(t, s.expose)
		err = errors.Join(err, patchStatus(ctx, r.Client, r.Recorder, t, before))
	}()
	phases := []func(context.Context, *tenantScope) error{
		r.claimWorkspace,
		r.reconcileSigningKey,
		r.compile,
		r.reconcileSecretFiles,
		r.reconcileConfigMap,
		r.recordConfiguration,
		r.reconcileServices,
		r.reconcileTLS,
		r.reconcileStatefulSet,
		r.reconcilePDB,
		r.expandVolumes,
		r.reconcileNetworkPolicy,
		r.reconcileExpose,
		r.reconcilePodMonitor,
		r.observePods,
	}
	for _, phase := range phases {
		if err := phase(ctx, s); err != nil {
			return ctrl.Result{}, err
		}
	}
	if s.compileErr != nil {
		return ctrl.Result{}, reconcile.TerminalError(s.compileErr)
	}
	if len(s.loads) > 0 && loadedHash(s.loads) != s.inForceHash() && (s.requeueAfter == 0 || s.requeueAfter > loadedRecheck) {
		// Kubelet brings a ConfigMap change to the pods within a minute or
		// so, and pod events do not say when: ask again.
		s.requeueAfter = loadedRecheck
	}
	return ctrl.Result{RequeueAfter: s.requeueAfter}, nil
}

// loadedRecheck is how often the operator asks bus pods again while they
// do not serve the compiled configuration.
const loadedRecheck = 3 * time.Second

// inForceHash is the hash of the configuration in the ConfigMap: compiled
// now, or the last valid one.
func (s *tenantScope) inForceHash() string {
	if s.configHash != "" {
		return s.configHash
	}
	return s.tenant.Status.ConfigHash
}

// nameConflict records that name is taken by an object the Tenant does
// not control: the operator never adopts it, the user must rename one.
func (s *tenantScope) nameConflict(kind, name string) error {
	s.conflict = fmt.Errorf("%s %s exists and is not controlled by Tenant %s", kind, name, s.tenant.Name)
	return reconcile.TerminalError(s.conflict)
}

// checkOwnership fails when obj (read into from the cache) exists and is
// not controlled by the Tenant.
func (r *TenantReconciler) checkOwnership(ctx context.Context, s *tenantScope, kind, name string, obj client.Object) error {
	err := r.Get(ctx, types.NamespacedName{Namespace: s.tenant.Namespace, Name: name}, obj)
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("get %s %s: %w", kind, name, err)
	case !controlledBy(obj, s.tenant):
		return s.nameConflict(kind, name)
	}
	return nil
}

// reconcileSigningKey makes the signing key Secret once and keeps it.
func (r *TenantReconciler) reconcileSigningKey(ctx context.Context, s *tenantScope) error {
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
			return fmt.Errorf("signing key owner: %w", err)
		}
		if err := r.Create(ctx, sec); err != nil {
			return fmt.Errorf("create signing key secret: %w", err)
		}
		r.Recorder.Eventf(t, sec, corev1.EventTypeNormal, "SigningKeyGenerated", "Create", "generated the workspace signing key in Secret %s", name)
	case err != nil:
		return fmt.Errorf("get signing key secret: %w", err)
	case !controlledBy(sec, t):
		return s.nameConflict("Secret", name)
	case ensureManagedLabel(sec):
		if err := r.Update(ctx, sec); err != nil {
			return fmt.Errorf("label signing key secret: %w", err)
		}
	case len(strings.TrimSpace(string(sec.Data[SigningKeyKey]))) < 32:
		if sec.Data == nil {
			sec.Data = map[string][]byte{}
		}
		sec.Data[SigningKeyKey] = []byte(randomHex(32))
		if err := r.Update(ctx, sec); err != nil {
			return fmt.Errorf("update signing key secret: %w", err)
		}
		r.Recorder.Eventf(t, sec, corev1.EventTypeWarning, "SigningKeyGenerated", "Update", "Secret %s held no usable signing key: generated a new one, earlier tokens are invalid", name)
	}
	s.secret = sec
	s.signingKey = []byte(strings.TrimSpace(string(sec.Data[SigningKeyKey])))
	return nil
}

// reconcileSecretFiles keeps the Tenant's Secret holding exactly the signing
// key and the files the compiled configuration names. It runs before the
// ConfigMap is written, so a configuration never names a file its Secret
// lacks; a configuration that did not compile leaves the Secret as it is.
func (r *TenantReconciler) reconcileSecretFiles(ctx context.Context, s *tenantScope) error {
	if s.configYAML == nil {
		return nil
	}
	want := map[string][]byte{SigningKeyKey: s.secret.Data[SigningKeyKey]}
	maps.Copy(want, s.secretFiles)
	if maps.EqualFunc(want, s.secret.Data, bytes.Equal) {
		return nil
	}
	s.secret.Data = want
	if err := r.Update(ctx, s.secret); err != nil {
		return fmt.Errorf("update secret %s: %w", s.secret.Name, err)
	}
	return nil
}

// compile gathers the Tenant's Connections, their Grants and Secrets, and
// its OwnershipPolicies, and compiles the workspace configuration. A
// configuration that does not compile is recorded, not returned: the
// workloads are still kept, serving the last valid configuration.
func (r *TenantReconciler) compile(ctx context.Context, s *tenantScope) error {
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
		return fmt.Errorf("list connections: %w", err)
	}
	in.Connections = conns
	for i := range conns {
		c := &conns[i]
		gs, err := grantsOfConnection(ctx, r.Client, t.Namespace, c.Name)
		if err != nil {
			return fmt.Errorf("list grants: %w", err)
		}
		in.Grants = append(in.Grants, gs...)
		for _, name := range connectionSecretNames(c) {
			sec := &corev1.Secret{}
			err := r.Secrets.Get(ctx, types.NamespacedName{Namespace: t.Namespace, Name: name}, sec)
			switch {
			case apierrors.IsNotFound(err):
			case err != nil:
				return fmt.Errorf("get secret %s: %w", name, err)
			default:
				in.Secrets[name] = sec
			}
		}
	}
	if in.OwnershipPolicies, err = policiesOfTenant(ctx, r.Client, t.Namespace, t.Name); err != nil {
		return fmt.Errorf("list ownership policies: %w", err)
	}
	w, err := workspace.Compile(in)
	if err != nil {
		s.compileErr = err
		return nil
	}
	s.compiledFrom = compiledObjects(in)
	b, err := MarshalWorkspace(w)
	if err != nil {
		return fmt.Errorf("marshal workspace configuration: %w", err)
	}
	// The document names its own hash, so a bus pod reports the same one
	// whatever the bytes of the file it reads.
	s.configHash = ConfigHash(b)
	s.configYAML, s.connections = fmt.Appendf(b, "configHash: %s\n", s.configHash), len(w.Connections)
	s.secretFiles = workspace.SecretFiles(in)
	return nil
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

// ConfigHash is the hash of a configuration document as the operator
// annotates it and the bus reports it (config.DocumentHash).
func ConfigHash(b []byte) string { return config.DocumentHash(b) }

// apply server-side applies obj as the operator's field manager, taking
// over fields someone else changed: that is how drift is repaired.
//
// Apply decodes the server's answer back into obj, so obj must own every
// map, slice and pointer it holds: one taken from a cached object or from
// the operator's Options would be written by every reconcile at once
// (deep-copy them, as busResources does).
func (r *TenantReconciler) apply(ctx context.Context, obj runtime.ApplyConfiguration, what string) error {
	if err := r.Apply(ctx, obj, client.FieldOwner(FieldManager), client.ForceOwnership); err != nil {
		return fmt.Errorf("apply %s: %w", what, err)
	}
	return nil
}

func (r *TenantReconciler) reconcileConfigMap(ctx context.Context, s *tenantScope) error {
	t := s.tenant
	cm := &corev1.ConfigMap{}
	if err := r.checkOwnership(ctx, s, "ConfigMap", configMapName(t), cm); err != nil {
		return err
	}
	if s.configYAML == nil {
		// Keep the last valid configuration, if there is one.
		s.hasConfigMap = cm.Data[ConfigFile] != ""
		return nil
	}
	if err := r.apply(ctx, desiredConfigMap(t, s.configYAML, s.configHash), "configmap"); err != nil {
		return err
	}
	s.hasConfigMap = true
	return nil
}

func (r *TenantReconciler) reconcileServices(ctx context.Context, s *tenantScope) error {
	t := s.tenant
	for _, name := range []string{busName(t), opsServiceName(t)} {
		if err := r.checkOwnership(ctx, s, "Service", name, &corev1.Service{}); err != nil {
			return err
		}
	}
	if err := r.apply(ctx, desiredHTTPService(t), "http service"); err != nil {
		return err
	}
	return r.apply(ctx, desiredOpsService(t), "ops service")
}

func (r *TenantReconciler) reconcileStatefulSet(ctx context.Context, s *tenantScope) error {
	t := s.tenant
	sts := &appsv1.StatefulSet{}
	if err := r.checkOwnership(ctx, s, "StatefulSet", busName(t), sts); err != nil {
		return err
	}
	if !s.hasConfigMap {
		// Its pods would wait for a ConfigMap that does not exist.
		s.sts = &appsv1.StatefulSet{}
		return nil
	}
	desired := desiredStatefulSet(t, r.Options)
	keepClaimTemplateSize(desired, sts)
	if err := r.apply(ctx, desired, "statefulset"); err != nil {
		return err
	}
	// The status comes from the cache: the StatefulSet controller writes it,
	// and its watch brings every change back here.
	if sts.Name != "" {
		s.sts = sts
	} else {
		s.sts = &appsv1.StatefulSet{}
	}
	return nil
}

func (r *TenantReconciler) reconcilePDB(ctx context.Context, s *tenantScope) error {
	t := s.tenant
	if err := r.checkOwnership(ctx, s, "PodDisruptionBudget", busName(t), &policyv1.PodDisruptionBudget{}); err != nil {
		return err
	}
	if !s.hasConfigMap {
		return nil
	}
	return r.apply(ctx, desiredPDB(t), "poddisruptionbudget")
}

// observePods asks every ready bus pod which configuration it serves, and
// reads why the others are not ready (their pods and volume claims).
func (r *TenantReconciler) observePods(ctx context.Context, s *tenantScope) error {
	if s.sts == nil || !s.hasConfigMap {
		return nil
	}
	t := s.tenant
	var pods corev1.PodList
	if err := r.List(ctx, &pods, client.InNamespace(t.Namespace), client.MatchingLabels{LabelTenant: t.Name, LabelManagedBy: FieldManager}); err != nil {
		return fmt.Errorf("list bus pods: %w", err)
	}
	prober := r.Prober
	if prober == nil {
		prober = &HTTPConfigProber{}
	}
	ready := 0
	for i := range pods.Items {
		p := &pods.Items[i]
		if !podReady(p) {
			continue
		}
		ready++
		hash, err := prober.LoadedConfigHash(ctx, p, t.EffectiveWorkspaceID())
		s.loads = append(s.loads, podLoad{pod: p.Name, hash: hash, err: err})
	}
	if ready < int(t.EffectiveReplicas()) {
		var pvcs corev1.PersistentVolumeClaimList
		if err := r.List(ctx, &pvcs, client.InNamespace(t.Namespace), client.MatchingLabels(selectorLabels(t))); err != nil {
			return fmt.Errorf("list volume claims: %w", err)
		}
		s.problems = podProblems(pods.Items, pvcs.Items)
	}
	s.podsObserved = true
	return nil
}

// finalize applies the deletion policy, then lets the Tenant go. Its
// workloads go with it through their owner references.
func (r *TenantReconciler) finalize(ctx context.Context, t *v1alpha1.Tenant) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(t, v1alpha1.Finalizer) {
		return ctrl.Result{}, nil
	}
	if t.Spec.Storage != nil && t.Spec.Storage.External != nil && t.EffectiveDeletionPolicy() == v1alpha1.DeletionPolicyDelete {
		wait, err := r.deleteExternalData(ctx, t)
		if err != nil || wait > 0 {
			return ctrl.Result{RequeueAfter: wait}, err
		}
	}
	var pvcs corev1.PersistentVolumeClaimList
	if err := r.APIReader.List(ctx, &pvcs, client.InNamespace(t.Namespace), client.MatchingLabels(selectorLabels(t))); err != nil {
		return ctrl.Result{}, fmt.Errorf("list volumes: %w", err)
	}
	prefix := dataVolume + "-" + busName(t) + "-"
	var names []string
	for _, p := range pvcs.Items {
		if strings.HasPrefix(p.Name, prefix) {
			names = append(names, p.Name)
		}
	}
	if t.EffectiveDeletionPolicy() == v1alpha1.DeletionPolicyDelete {
		for _, n := range names {
			pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: t.Namespace, Name: n}}
			if err := r.Delete(ctx, pvc); err != nil && !apierrors.IsNotFound(err) {
				return ctrl.Result{}, fmt.Errorf("delete volume %s: %w", n, err)
			}
		}
		r.Recorder.Eventf(t, nil, corev1.EventTypeNormal, "VolumesDeleted", "Delete", "deletionPolicy delete: deleted %d volume(s) %v", len(names), names)
	} else if len(names) > 0 {
		r.Recorder.Eventf(t, nil, corev1.EventTypeNormal, "VolumesRetained", "Delete", "deletionPolicy retain: kept %d volume(s) %v", len(names), names)
	}
	orig := t.DeepCopy()
	controllerutil.RemoveFinalizer(t, v1alpha1.Finalizer)
	if err := r.Patch(ctx, t, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, fmt.Errorf("remove finalizer: %w", err)
	}
	return ctrl.Result{}, nil
}

// randomHex returns n random bytes, hex-encoded.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return hex.EncodeToString(b)
}

// SetupWithManager registers the reconciler and its watches.
func (r *TenantReconciler) SetupWithManager(mgr ctrl.Manager) error {
	var err error
	if r.gatewayAPI, err = gatewayAPIInstalled(mgr.GetRESTMapper()); err != nil {
		return err
	}
	b := r.Secrets.Watch(ctrl.NewControllerManagedBy(mgr), r.secretToTenants)
	if r.gatewayAPI {
		b = b.Owns(&gatewayv1.HTTPRoute{})
	}
	c, err := b.
		For(&v1alpha1.Tenant{}, builder.WithPredicates(predicate.Or[client.Object](specChanged, predicate.LabelChangedPredicate{}, predicate.AnnotationChangedPredicate{}))).
		Owns(&appsv1.StatefulSet{}).
		Owns(&corev1.Service{}).
		Owns(&corev1.ConfigMap{}).
		Owns(&corev1.Secret{}).
		Owns(&policyv1.PodDisruptionBudget{}).
		Owns(&networkingv1.NetworkPolicy{}).
		Owns(&networkingv1.Ingress{}).
		// A Connection's status writes cannot change the configuration:
		// its credentials and their rotation time come through the Secret
		// watch.
		Watches(&v1alpha1.Connection{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			return requestsFor(o.GetNamespace(), o.(*v1alpha1.Connection).Spec.TenantRef.Name)
		}), builder.WithPredicates(specChanged)).
		Watches(&v1alpha1.OwnershipPolicy{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			return requestsFor(o.GetNamespace(), o.(*v1alpha1.OwnershipPolicy).Spec.TenantRef.Name)
		}), builder.WithPredicates(specChanged)).
		Watches(&v1alpha1.Grant{}, handler.EnqueueRequestsFromMapFunc(r.grantToTenant), builder.WithPredicates(specChanged)).
		Watches(&v1alpha1.Tenant{}, handler.EnqueueRequestsFromMapFunc(r.sameWorkspaceTenants), builder.WithPredicates(specChanged)).
		Watches(&corev1.PersistentVolumeClaim{}, handler.EnqueueRequestsFromMapFunc(claimToTenant)).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			return requestsFor(o.GetNamespace(), o.GetLabels()[LabelTenant])
		}), builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			return o.GetLabels()[LabelManagedBy] == FieldManager
		}))).
		Build(observed{kind: "Tenant", inner: r})
	r.controller = c
	return err
}

func (r *TenantReconciler) grantToTenant(ctx context.Context, o client.Object) []reconcile.Request {
	g := o.(*v1alpha1.Grant)
	c := &v1alpha1.Connection{}
	if err := r.Get(ctx, types.NamespacedName{Namespace: g.Namespace, Name: g.Spec.ConnectionRef.Name}, c); err != nil {
		return nil
	}
	return requestsFor(g.Namespace, c.Spec.TenantRef.Name)
}

func (r *TenantReconciler) secretToTenants(ctx context.Context, o client.Object) []reconcile.Request {
	var l v1alpha1.ConnectionList
	if err := r.List(ctx, &l, client.InNamespace(o.GetNamespace()), client.MatchingFields{indexSecretNames: o.GetName()}); err != nil {
		return nil
	}
	var names []string
	for _, c := range l.Items {
		names = append(names, c.Spec.TenantRef.Name)
	}
	names = append(names, r.tenantsOfTLSSecret(ctx, o)...)
	return requestsFor(o.GetNamespace(), names...)
}
