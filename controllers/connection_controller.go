package controllers

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	config "github.com/storybus/storybus/api/config/v1alpha1"
	"github.com/storybus/storybus/api/v1alpha1"
	"github.com/storybus/storybus/controllers/workspace"
)

// ConnectionReconciler reports on a Connection: whether its references
// resolve, whether its credentials Secret (which
// ConnectionCredentialsReconciler keeps) is usable, and whether its Tenant
// serves it. It writes the Connection's status and nothing else.
type ConnectionReconciler struct {
	client.Client
	// Secrets reads and watches Secrets.
	Secrets *Secrets
	// Recorder records Events on the Connection.
	Recorder events.EventRecorder
}

// connectionScope is what the phases of one reconcile share.
type connectionScope struct {
	conn *v1alpha1.Connection
	refs refsObservation
	// tenant is the referenced Tenant, when it exists.
	tenant *v1alpha1.Tenant
	// sec is the credentials Secret, nil until it is made; owned says the
	// operator made it; inUse is set when another object controls it.
	sec   *corev1.Secret
	owned bool
	inUse error
	// tooShort is set when the Secret's client secret is too short for
	// the bus to accept.
	tooShort error
}

// refsObservation is what a reference check saw: reason is empty when
// every reference resolved, else the reason and message to report; checked
// is false when the check did not run.
type refsObservation struct {
	checked bool
	reason  string
	message string
}

// +kubebuilder:rbac:groups=bus.storybus.io,resources=connections/status,verbs=get;patch

// Reconcile reports one Connection's status.
func (r *ConnectionReconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, err error) {
	// The cache's own Connection is what it was; the copy is what it
	// becomes.
	before, err := liveConnection(ctx, r.Client, req.NamespacedName, client.UnsafeDisableDeepCopy)
	if before == nil || err != nil {
		return ctrl.Result{}, err
	}
	c := before.DeepCopy()
	s := &connectionScope{conn: c}
	defer func() {
		setConnectionStatus(s)
		wait, perr := patchStatus(ctx, r.Client, r.Recorder, c, before, s.tenant)
		if err = errors.Join(err, perr); err == nil {
			res = lowestNonZeroResult(res, requeueAfter(wait))
		}
	}()
	return doReconcile(ctx, s, noRequeue(r.resolveRefs), noRequeue(r.observeCredentials))
}

// observeCredentials reads the credentials Secret, if it is there yet.
func (r *ConnectionReconciler) observeCredentials(ctx context.Context, s *connectionScope) error {
	c := s.conn
	sec := &corev1.Secret{}
	err := r.Secrets.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: c.CredentialsSecretName()}, sec)
	switch {
	case apierrors.IsNotFound(err):
		// Its creation brings the Connection back (the Secrets watch).
		return nil
	case err != nil:
		return fmt.Errorf("get credentials secret: %w", err)
	}
	if s.inUse = secretInUse(c, sec); s.inUse != nil {
		return nil
	}
	if !credentialsKept(sec) {
		// ConnectionCredentialsReconciler has not filled it in or taken
		// in a change made by hand yet: judged as it is, a Secret waiting
		// for its generated secret would be too short. Its update brings
		// the Connection back.
		return nil
	}
	s.sec, s.owned = sec, controlledBy(sec, c)
	// A secret a user put in the Secret is refused by the bus when short:
	// say so here, where it can be fixed.
	s.tooShort = config.CheckSecretLength(strings.TrimSpace(string(sec.Data[v1alpha1.CredentialsClientSecretKey])))
	return nil
}

// liveConnection reads Connection key from the cache with opts: nil when
// it is gone or being deleted (its generated Secret goes with it through
// its owner reference).
func liveConnection(ctx context.Context, c client.Reader, key types.NamespacedName, opts ...client.GetOption) (*v1alpha1.Connection, error) {
	conn := &v1alpha1.Connection{}
	if err := c.Get(ctx, key, conn, opts...); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("get connection: %w", err)
	}
	if !conn.DeletionTimestamp.IsZero() {
		return nil, nil
	}
	return conn, nil
}

// resolveRefs checks the Tenant and the IAM access key Secret exist.
func (r *ConnectionReconciler) resolveRefs(ctx context.Context, s *connectionScope) error {
	c := s.conn
	obs, t, err := resolveTenant(ctx, r.Client, c.Namespace, c.Spec.TenantRef.Name)
	if err != nil {
		return err
	}
	s.tenant = t
	if obs.reason == "" && c.Spec.IAM != nil {
		name := c.Spec.IAM.AccessKeySecretRef.Name
		sec := &corev1.Secret{}
		err := r.Secrets.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: name}, sec)
		// The id as the Tenant's compilation will read it.
		id, _ := workspace.IAMKeys(c, map[string]*corev1.Secret{name: sec})
		switch {
		case apierrors.IsNotFound(err):
			obs = refsObservation{checked: true, reason: v1alpha1.ReasonSecretNotFound, message: fmt.Sprintf("IAM access key Secret %s not found", name)}
		case err != nil:
			return fmt.Errorf("get secret %s: %w", name, err)
		case id == "":
			obs = refsObservation{checked: true, reason: v1alpha1.ReasonSecretNotFound, message: fmt.Sprintf("IAM access key Secret %s has no key %s", name, v1alpha1.IAMAccessKeyIDKey)}
		}
	}
	s.refs = obs
	return nil
}

// resolveTenant reports whether Tenant name exists and is not going, and
// returns it when it exists: the cache's own, to be read only.
func resolveTenant(ctx context.Context, c client.Reader, ns, name string) (refsObservation, *v1alpha1.Tenant, error) {
	t := &v1alpha1.Tenant{}
	// The Tenant is only read: a copy for each of its Connections' and
	// Grants' reconciles was a twentieth of what the operator allocated
	// at 500 Tenants.
	err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, t, client.UnsafeDisableDeepCopy)
	switch {
	case apierrors.IsNotFound(err):
		return refsObservation{checked: true, reason: v1alpha1.ReasonTenantNotFound, message: fmt.Sprintf("Tenant %s not found in namespace %s", name, ns)}, nil, nil
	case err != nil:
		return refsObservation{}, nil, fmt.Errorf("get tenant %s: %w", name, err)
	case !t.DeletionTimestamp.IsZero():
		return refsObservation{checked: true, reason: v1alpha1.ReasonTenantDeleting, message: fmt.Sprintf("Tenant %s is being deleted", name)}, t, nil
	}
	return refsObservation{checked: true}, t, nil
}

// SetupWithManager registers the reconciler and its watches: the
// Connection's spec and rotate annotation, its credentials Secret (made by
// ConnectionCredentialsReconciler, or named), and its Tenant's changes of
// what is in force.
func (r *ConnectionReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return r.Secrets.Watch(ctrl.NewControllerManagedBy(mgr).Named("connection"), connectionsNamingSecret(r.Client), nil).
		For(&v1alpha1.Connection{}, builder.WithPredicates(predicate.Or[client.Object](specChanged, predicate.AnnotationChangedPredicate{}))).
		Owns(&corev1.Secret{}).
		Watches(&v1alpha1.Tenant{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			conns, err := connectionsOfTenant(ctx, r.Client, o.GetNamespace(), o.GetName())
			if err != nil {
				return nil
			}
			var names []string
			for _, c := range conns {
				names = append(names, c.Name)
			}
			return requestsFor(o.GetNamespace(), names...)
		}), builder.WithPredicates(tenantInForceChanged)).
		Complete(observed{kind: "Connection", inner: r})
}
