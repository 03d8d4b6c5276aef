package controllers

import (
	"context"
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
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	config "github.com/storybus/storybus/api/config/v1alpha1"
	"github.com/storybus/storybus/api/v1alpha1"
	"github.com/storybus/storybus/controllers/workspace"
)

// ConnectionCredentialsReconciler keeps a Connection's credentials Secret:
// it makes it, fills in missing keys, and rotates the client secret on
// request. It writes no status (ConnectionReconciler reports on the
// Secret) and watches only what its Secret depends on, so that in a burst
// of new Connections their Secrets, which every Tenant's first compile
// waits for, are not queued behind status reports.
type ConnectionCredentialsReconciler struct {
	client.Client
	// Secrets reads and watches Secrets.
	Secrets *Secrets
	// Recorder records Events on the Connection.
	Recorder events.EventRecorder
	Options
}

// +kubebuilder:rbac:groups=bus.storybus.io,resources=connections,verbs=get;list;watch
// +kubebuilder:rbac:groups=bus.storybus.io,resources=connections/finalizers,verbs=update

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

// Reconcile makes the credentials Secret when it is missing, fills in
// missing keys of an existing one, and rotates the client secret when a
// new rotation is requested.
func (r *ConnectionCredentialsReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	c, err := liveConnection(ctx, r.Client, req.NamespacedName)
	if c == nil || err != nil {
		return ctrl.Result{}, err
	}
	name := c.CredentialsSecretName()
	now := r.Now()
	sec := &corev1.Secret{}
	err = r.Secrets.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: name}, sec)
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
			return ctrl.Result{}, fmt.Errorf("credentials owner: %w", err)
		}
		if err := r.Create(ctx, sec); err != nil {
			return ctrl.Result{}, fmt.Errorf("create credentials secret: %w", err)
		}
		return ctrl.Result{}, nil
	case err != nil:
		return ctrl.Result{}, fmt.Errorf("get credentials secret: %w", err)
	}
	if inUse := secretInUse(c, sec); inUse != nil {
		// The Connection's CredentialsReady says so.
		return ctrl.Result{}, reconcile.TerminalError(inUse)
	}
	return ctrl.Result{}, r.updateCredentials(ctx, c, sec, now)
}

// updateCredentials fills in and rotates an existing credentials Secret.
// The new secret and the record of the request handled are written in one
// update, so a rotation happens exactly once.
func (r *ConnectionCredentialsReconciler) updateCredentials(ctx context.Context, c *v1alpha1.Connection, sec *corev1.Secret, now time.Time) error {
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

// SetupWithManager registers the reconciler and its watches: the
// Connection's spec and rotate annotation, the Secrets it makes, and the
// Secrets Connections name.
func (r *ConnectionCredentialsReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return r.Secrets.Watch(ctrl.NewControllerManagedBy(mgr).Named("connection-credentials"), connectionsNamingSecret(r.Client), nil).
		// The rotate annotation is a request too.
		For(&v1alpha1.Connection{}, builder.WithPredicates(predicate.Or[client.Object](specChanged, predicate.AnnotationChangedPredicate{}))).
		Owns(&corev1.Secret{}).
		Complete(observed{kind: "Connection", inner: r})
}

// connectionsNamingSecret maps a Secret to the Connections whose
// credentials it holds.
func connectionsNamingSecret(c client.Reader) func(context.Context, client.Object) []reconcile.Request {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		conns, err := connectionsReadingSecret(ctx, c, o.GetNamespace(), o.GetName())
		if err != nil {
			return nil
		}
		var names []string
		for _, conn := range conns {
			names = append(names, conn.Name)
		}
		return requestsFor(o.GetNamespace(), names...)
	}
}

// secretInUse is the error of a credentials Secret another object
// controls, nil when none does or c does.
func secretInUse(c *v1alpha1.Connection, sec *corev1.Secret) error {
	if ref := metav1.GetControllerOf(sec); ref != nil && ref.UID != c.UID {
		return fmt.Errorf("the Secret %s is controlled by %s %s", sec.Name, ref.Kind, ref.Name)
	}
	return nil
}

// credentialsKept reports whether credentials Secret sec has been taken
// in by the credentials controller: its secret filled in and its hash
// recorded. A rotation asked since does not count: until it is made the
// Secret's secret is the one in force.
func credentialsKept(sec *corev1.Secret) bool {
	_, handled := sec.Annotations[v1alpha1.AnnotationRotationHandled]
	return handled && sec.Annotations[v1alpha1.AnnotationSecretHash] == secretHash(sec)
}
