package controllers

import (
	"cmp"
	"context"
	"errors"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/storybus/storybus/api/v1alpha1"
)

// +kubebuilder:rbac:groups="",resources=services,verbs=delete
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=delete
// +kubebuilder:rbac:groups=apps,resources=statefulsets,verbs=patch;delete
// +kubebuilder:rbac:groups=bus.storybus.io,resources=buspools,verbs=get;list;watch

// reconcilePooled is the workload controller's part for a Tenant placed on
// a pool: the pool's replicas serve it, so the Tenant's own bus, if it had
// one, goes (its StatefulSet, Services, PodDisruptionBudget,
// NetworkPolicy and Ingress; its volumes stay, and serve it again if it
// comes back to a bus of its own). Its own spec.expose sends its path to
// the pool (tenant_pool_expose.go), and its externalEndpoint is that
// route's, or the pool's, with the workspace's path. Its own key pair
// (spec.tls) is judged, and its Certificate written, as for a bus of its
// own (the pool controller carries the pair to the replicas); the
// conditions that describe only a bus of its own are removed.
func (r *TenantWorkloadReconciler) reconcilePooled(ctx context.Context, t *v1alpha1.Tenant) (_ ctrl.Result, err error) {
	before := t.DeepCopy()
	defer func() {
		err = errors.Join(err, workloadStatus.write(ctx, r.Client, r.Recorder, t, before))
	}()
	for _, typ := range []string{v1alpha1.ConditionVolumeExpansion, v1alpha1.ConditionMonitored} {
		meta.RemoveStatusCondition(&t.Status.Conditions, typ)
	}
	// Its own key pair, which the replicas present for its host names:
	// the Certificate written, or the provided Secret judged, as for a
	// bus of its own. Its failure stops nothing else below.
	ws := &workloadScope{tenant: t}
	tlsRes, tlsErr := r.reconcileTLS(ctx, ws)
	if ws.conflict != nil {
		setCondition(t, nameConflictCondition(v1alpha1.ConditionCertificateReady, ws.conflict))
	}
	defer func() {
		// A terminal TLS failure (the Certificate's name taken) is in
		// CertificateReady; joined to another error it would make that
		// one terminal too, and stop its retries.
		switch {
		case err == nil:
			err = tlsErr
		case tlsErr != nil && !errors.Is(tlsErr, reconcile.TerminalError(nil)):
			err = errors.Join(err, tlsErr)
		}
	}()
	if c := meta.FindStatusCondition(t.Status.Conditions, v1alpha1.ConditionAvailable); c != nil && isConflict(*c) {
		meta.RemoveStatusCondition(&t.Status.Conditions, v1alpha1.ConditionAvailable)
	}
	p, err := r.poolOf(ctx, t)
	if err != nil {
		return ctrl.Result{}, err
	}
	if err := r.stopOwnBus(ctx, t); err != nil {
		return ctrl.Result{}, err
	}
	o, err := r.reconcilePooledExpose(ctx, t, p)
	applyExposeStatus(t, o)
	t.Status.ExternalEndpoint = pooledExternalEndpoint(t, p)
	return tlsRes, err
}

// poolOf is the BusPool t names; nil when it is not there.
func (r *TenantWorkloadReconciler) poolOf(ctx context.Context, t *v1alpha1.Tenant) (*v1alpha1.BusPool, error) {
	ns, name, _ := t.PoolKey()
	p := &v1alpha1.BusPool{}
	switch err := r.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, p); {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("get buspool %s/%s: %w", ns, name, err)
	}
	return p, nil
}

// pooledExternalEndpoint is the external base URL of a pooled Tenant's
// own route (its Ingress's host, or its route's first host name that is
// not a wildcard), or else of its pool's, with the workspace's path; ""
// when neither has one or the pool is not there.
func pooledExternalEndpoint(t *v1alpha1.Tenant, p *v1alpha1.BusPool) string {
	if p == nil {
		return ""
	}
	base := cmp.Or(externalEndpoint(t), poolExternalEndpoint(p))
	if base == "" {
		return ""
	}
	return base + "/v1/tenants/" + t.EffectiveWorkspaceID()
}

// stopOwnBus deletes the objects of a bus of the Tenant's own that it
// controls, but its HTTPRoute, which reconcilePooledExpose keeps or deletes. The StatefulSet's volume claims are kept whatever the deletion
// policy: the policy applies when the Tenant is deleted.
func (r *TenantWorkloadReconciler) stopOwnBus(ctx context.Context, t *v1alpha1.Tenant) error {
	sts := &appsv1.StatefulSet{}
	switch err := r.Get(ctx, types.NamespacedName{Namespace: t.Namespace, Name: busName(t)}, sts); {
	case apierrors.IsNotFound(err):
	case err != nil:
		return fmt.Errorf("get statefulset %s: %w", busName(t), err)
	case controlledBy(sts, t):
		if p := sts.Spec.PersistentVolumeClaimRetentionPolicy; p != nil && p.WhenDeleted == appsv1.DeletePersistentVolumeClaimRetentionPolicyType {
			orig := sts.DeepCopy()
			p.WhenDeleted = appsv1.RetainPersistentVolumeClaimRetentionPolicyType
			if err := r.Patch(ctx, sts, client.MergeFrom(orig)); err != nil {
				return fmt.Errorf("keep the volumes of statefulset %s: %w", busName(t), err)
			}
		}
		if err := r.Delete(ctx, sts); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete statefulset %s: %w", busName(t), err)
		}
		r.Recorder.Eventf(t, nil, corev1.EventTypeNormal, "BusStopped", "Delete",
			"the Tenant is placed on BusPool %s: its own bus is stopped, its volumes kept", t.Spec.Pool.Name)
	}
	objects := []struct {
		obj  client.Object
		name string
	}{
		{&corev1.Service{}, busName(t)},
		{&corev1.Service{}, opsServiceName(t)},
		{&policyv1.PodDisruptionBudget{}, busName(t)},
		{&networkingv1.NetworkPolicy{}, busName(t)},
		{&networkingv1.Ingress{}, busName(t)},
	}
	for _, o := range objects {
		err := r.Get(ctx, types.NamespacedName{Namespace: t.Namespace, Name: o.name}, o.obj)
		switch {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return fmt.Errorf("get %T %s: %w", o.obj, o.name, err)
		case !controlledBy(o.obj, t):
			continue
		}
		if err := r.Delete(ctx, o.obj); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete %T %s: %w", o.obj, o.name, err)
		}
	}
	return nil
}

// tenantsOfPoolSpec maps a BusPool to the Tenants that name it: their
// externalEndpoint is the pool's.
func (r *TenantWorkloadReconciler) tenantsOfPoolSpec(ctx context.Context, o client.Object) []reconcile.Request {
	l, err := tenantsNamingPool(ctx, r.Client, client.ObjectKeyFromObject(o))
	if err != nil {
		return nil
	}
	out := make([]reconcile.Request, 0, len(l))
	for _, t := range l {
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&t)})
	}
	return out
}
