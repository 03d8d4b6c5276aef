package controllers

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	config "github.com/storybus/storybus/api/config/v1alpha1"
	"github.com/storybus/storybus/api/v1alpha1"
	"github.com/storybus/storybus/controllers/workspace"
)

// ConnectionReconciler keeps a Connection's credentials Secret and rotates
// its client secret on request.
type ConnectionReconciler struct {
	client.Client
	// Secrets reads and watches Secrets.
	Secrets *Secrets
	// Recorder records Events on the Connection.
	Recorder events.EventRecorder
	Options
}

// connectionScope is what the phases of one reconcile share.
type connectionScope struct {
	conn *v1alpha1.Connection
	refs refsObservation
	// tenant is the referenced Tenant, when it exists.
	tenant *v1alpha1.Tenant
	// sec is the credentials Secret after the credentials phase; owned
	// says the operator made it; inUse is set when another object controls
	// it.
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

// +kubebuilder:rbac:groups=bus.storybus.io,resources=connections,verbs=get;list;watch
// +kubebuilder:rbac:groups=bus.storybus.io,resources=connections/status,verbs=get;patch
// +kubebuilder:rbac:groups=bus.storybus.io,resources=connections/finalizers,verbs=update

// Reconcile keeps one Connection's credentials and status.
func (r *ConnectionReconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, err error) {
	c := &v1alpha1.Connection{}
	if err := r.Get(ctx, req.NamespacedName, c); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("get connection: %w", err)
	}
	if !c.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil // its Secret goes through its owner reference
	}
	before := c.DeepCopy()
	s := &connectionScope{conn: c}
	defer func() {
		setConnectionStatus(s)
		wait, perr := patchStatus(ctx, r.Client, r.Recorder, c, before)
		if err = errors.Join(err, perr); err == nil {
			res = lowestNonZeroResult(res, requeueAfter(wait))
		}
	}()
	return doReconcile(ctx, s, noRequeue(r.resolveRefs), noRequeue(r.reconcileCredentials))
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
// returns it when it exists.
func resolveTenant(ctx context.Context, c client.Reader, ns, name string) (refsObservation, *v1alpha1.Tenant, error) {
	t := &v1alpha1.Tenant{}
	err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, t)
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

// rotationRequest is the request a Connection makes now, given the one last
// handled: the rotate counter, and the rotate annotation (an annotation
// removed leaves the last one in force, so removing it never rotates).
func rotationRequest(c *v1alpha1.Connection, handled string) string {
	_, lastAnn, _ := strings.Cut(handled, "/")
	ann := c.Annotations[v1alpha1.AnnotationRotate]
	if ann == "" {
		ann = lastAnn
	}
	return strconv.FormatInt(c.Spec.Credentials.Rotate, 10) + "/" + ann
}

// reconcileCredentials makes the credentials Secret when it is missing,
// fills in missing keys of an existing one, and rotates the client secret
// when a new rotation is requested.
func (r *ConnectionReconciler) reconcileCredentials(ctx context.Context, s *connectionScope) error {
	c := s.conn
	name := c.CredentialsSecretName()
	now := r.Now()
	sec := &corev1.Secret{}
	err := r.Secrets.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: name}, sec)
	switch {
	case apierrors.IsNotFound(err):
		sec = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{
				Name: name, Namespace: c.Namespace,
				Labels: map[string]string{LabelManagedBy: FieldManager, LabelTenant: c.Spec.TenantRef.Name, "bus.storybus.io/connection": c.Name},
				Annotations: map[string]string{
					v1alpha1.AnnotationRotationHandled: rotationRequest(c, ""),
					v1alpha1.AnnotationRotatedAt:       workspace.RotationTime(now, nil).Format(time.RFC3339),
				},
			},
			Type: corev1.SecretTypeOpaque,
			Data: map[string][]byte{
				v1alpha1.CredentialsClientIDKey:     []byte(c.Name),
				v1alpha1.CredentialsClientSecretKey: []byte(randomHex(32)),
			},
		}
		sec.Annotations[v1alpha1.AnnotationSecretHash] = secretHash(sec)
		if err := controllerutil.SetControllerReference(c, sec, r.Scheme()); err != nil {
			return fmt.Errorf("credentials owner: %w", err)
		}
		if err := r.Create(ctx, sec); err != nil {
			return fmt.Errorf("create credentials secret: %w", err)
		}
		// The CredentialsReady condition's Event reports it.
	case err != nil:
		return fmt.Errorf("get credentials secret: %w", err)
	default:
		if ref := metav1.GetControllerOf(sec); ref != nil && ref.UID != c.UID {
			s.inUse = fmt.Errorf("the Secret %s is controlled by %s %s", name, ref.Kind, ref.Name)
			return reconcile.TerminalError(s.inUse)
		}
		if err := r.updateCredentials(ctx, c, sec, now); err != nil {
			return err
		}
	}
	s.sec, s.owned = sec, controlledBy(sec, c)
	// A secret a user put in the Secret is refused by the bus when short:
	// say so here, where it can be fixed.
	s.tooShort = config.CheckSecretLength(strings.TrimSpace(string(sec.Data[v1alpha1.CredentialsClientSecretKey])))
	return nil
}

// updateCredentials fills in and rotates an existing credentials Secret.
// The new secret and the record of the request handled are written in one
// update, so a rotation happens exactly once.
func (r *ConnectionReconciler) updateCredentials(ctx context.Context, c *v1alpha1.Connection, sec *corev1.Secret, now time.Time) error {
	orig := sec.DeepCopy()
	if sec.Data == nil {
		sec.Data = map[string][]byte{}
	}
	if sec.Annotations == nil {
		sec.Annotations = map[string]string{}
	}
	var prev *time.Time
	if at, err := time.Parse(time.RFC3339, sec.Annotations[v1alpha1.AnnotationRotatedAt]); err == nil {
		prev = &at
	}
	regenerate := func() {
		sec.Data[v1alpha1.CredentialsClientSecretKey] = []byte(randomHex(32))
		sec.Annotations[v1alpha1.AnnotationRotatedAt] = workspace.RotationTime(now, prev).Format(time.RFC3339)
	}
	var event, note string
	eventType := corev1.EventTypeNormal
	lastSeen, hashSeen := sec.Annotations[v1alpha1.AnnotationSecretHash]
	if len(strings.TrimSpace(string(sec.Data[v1alpha1.CredentialsClientIDKey]))) == 0 {
		sec.Data[v1alpha1.CredentialsClientIDKey] = []byte(c.Name)
	}
	if controlledBy(sec, c) {
		ensureManagedLabel(sec) // the cache holds the Secrets the operator made
	}
	handled, seen := sec.Annotations[v1alpha1.AnnotationRotationHandled]
	want := rotationRequest(c, handled)
	switch {
	case len(strings.TrimSpace(string(sec.Data[v1alpha1.CredentialsClientSecretKey]))) == 0:
		regenerate()
		event, note = v1alpha1.ReasonCredentialsGenerated, "generated a client secret in Secret %s"
	case seen && handled != want:
		regenerate()
		event, note = v1alpha1.ReasonCredentialsRotated, "rotated the client secret in Secret %s: earlier tokens are revoked"
	case hashSeen && lastSeen != secretHash(sec):
		// Changed by hand or by a re-applied manifest: never silently. A
		// new secret revokes what the old one let clients obtain.
		sec.Annotations[v1alpha1.AnnotationRotatedAt] = workspace.RotationTime(now, prev).Format(time.RFC3339)
		event, note, eventType = v1alpha1.ReasonCredentialsChanged, "the client secret in Secret %s was changed outside a rotation: treated as a rotation, earlier tokens are revoked", corev1.EventTypeWarning
	}
	sec.Annotations[v1alpha1.AnnotationSecretHash] = secretHash(sec)
	released := false
	if controlledBy(sec, c) && sec.Annotations[lastAppliedAnnotation] != "" {
		// A user applied this Secret over the generated one: it is theirs
		// now, and never garbage-collected with the Connection.
		refs := sec.OwnerReferences[:0]
		for _, ref := range sec.OwnerReferences {
			if ref.UID != c.UID {
				refs = append(refs, ref)
			}
		}
		sec.OwnerReferences, released = refs, true
	}
	// A Secret seen for the first time records the request in force
	// without rotating: only a later change is a request.
	sec.Annotations[v1alpha1.AnnotationRotationHandled] = want
	if !released && equality.Semantic.DeepEqual(orig.Data, sec.Data) && equality.Semantic.DeepEqual(orig.Annotations, sec.Annotations) && equality.Semantic.DeepEqual(orig.Labels, sec.Labels) {
		return nil
	}
	if err := r.Update(ctx, sec); err != nil {
		return fmt.Errorf("update credentials secret: %w", err)
	}
	if event != "" {
		r.Recorder.Eventf(c, sec, eventType, event, "Update", note, sec.Name)
	}
	if released {
		r.Recorder.Eventf(c, sec, corev1.EventTypeWarning, v1alpha1.ReasonSecretReleased, "Update",
			"Secret %s was applied by a user over the generated one: the operator no longer owns it and will never delete it", sec.Name)
	}
	return nil
}

// lastAppliedAnnotation is where `kubectl apply` keeps what it applied.
const lastAppliedAnnotation = "kubectl.kubernetes.io/last-applied-configuration"

// secretHash is the AnnotationSecretHash of a credentials Secret's client
// secret, as the configuration hashes it (trimmed).
func secretHash(sec *corev1.Secret) string {
	return config.HashSecret(strings.TrimSpace(string(sec.Data[v1alpha1.CredentialsClientSecretKey])))
}

// SetupWithManager registers the reconciler and its watches.
func (r *ConnectionReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return r.Secrets.Watch(ctrl.NewControllerManagedBy(mgr), func(ctx context.Context, o client.Object) []reconcile.Request {
		var l v1alpha1.ConnectionList
		if err := r.List(ctx, &l, client.InNamespace(o.GetNamespace()), client.MatchingFields{indexSecretNames: o.GetName()}, client.UnsafeDisableDeepCopy); err != nil {
			return nil
		}
		var names []string
		for _, c := range l.Items {
			names = append(names, c.Name)
		}
		return requestsFor(o.GetNamespace(), names...)
	}, nil).
		// The rotate annotation is a request too.
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
