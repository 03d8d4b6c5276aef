package controllers

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/storybus/storybus/api/v1alpha1"
)

// Growing spec.storage.embedded.size. Kubernetes refuses any change of a
// StatefulSet's volumeClaimTemplates, so the StatefulSet keeps the size it
// was created with and the operator grows each volume claim
// data-<tenant>-bus-<i> itself; the storage driver then grows the volume,
// and the kubelet its file system, while the pod runs.

// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=storage.k8s.io,resources=storageclasses,verbs=get

// recheckStorageClass is how soon a Tenant whose volumes cannot grow looks
// at their StorageClass again: an administrator may allow expansion.
const recheckStorageClass = 5 * time.Minute

// embeddedSize is the size spec.storage.embedded asks of each volume; ok is
// false with external storage.
func embeddedSize(t *v1alpha1.Tenant) (size resource.Quantity, ok bool) {
	st := t.Spec.Storage
	if st != nil && st.External != nil {
		return resource.Quantity{}, false
	}
	if st != nil && st.Embedded != nil && st.Embedded.Size != nil {
		return *st.Embedded.Size, true
	}
	return resource.MustParse(defaultStorage), true
}

// claimTemplateSize is the size of sts's data volume claim template; ok is
// false when it has none.
func claimTemplateSize(sts *appsv1.StatefulSet) (size resource.Quantity, ok bool) {
	for _, c := range sts.Spec.VolumeClaimTemplates {
		if c.Name == dataVolume {
			size, ok = c.Spec.Resources.Requests[corev1.ResourceStorage]
			return size, ok
		}
	}
	return resource.Quantity{}, false
}

// keepClaimTemplateSize gives the desired StatefulSet the volume claim
// template size of the existing one (a zero existing one changes nothing),
// which the API server would refuse to change.
func keepClaimTemplateSize(desired *appsv1ac.StatefulSetApplyConfiguration, existing *appsv1.StatefulSet) {
	size, ok := claimTemplateSize(existing)
	if !ok || desired.Spec == nil {
		return
	}
	for _, c := range desired.Spec.VolumeClaimTemplates {
		if c.Name != nil && *c.Name == dataVolume && c.Spec != nil && c.Spec.Resources != nil {
			c.Spec.Resources.Requests = &corev1.ResourceList{corev1.ResourceStorage: size}
		}
	}
}

// expandVolumes grows every bus volume claim smaller than
// spec.storage.embedded.size whose StorageClass allows it, and records the
// VolumeExpansion condition. A size that never changed costs nothing.
func (r *TenantWorkloadReconciler) expandVolumes(ctx context.Context, s *workloadScope) (ctrl.Result, error) {
	t := s.tenant
	want, ok := embeddedSize(t)
	if !ok || s.sts == nil {
		return ctrl.Result{}, nil
	}
	created, ok := claimTemplateSize(s.sts)
	if !ok || want.Cmp(created) <= 0 {
		return ctrl.Result{}, nil
	}
	var pvcs corev1.PersistentVolumeClaimList
	if err := r.List(ctx, &pvcs, client.InNamespace(t.Namespace), client.MatchingLabels(selectorLabels(t))); err != nil {
		return ctrl.Result{}, fmt.Errorf("list volume claims: %w", err)
	}
	var refused, growing []string
	claims := 0
	for i := range pvcs.Items {
		pvc := &pvcs.Items[i]
		if !isDataClaim(t, pvc.Name) || !pvc.DeletionTimestamp.IsZero() {
			continue
		}
		claims++
		if asked := pvc.Spec.Resources.Requests[corev1.ResourceStorage]; asked.Cmp(want) < 0 {
			why, err := r.expansionRefused(ctx, pvc)
			if err != nil {
				return ctrl.Result{}, err
			}
			if why == "" {
				why, err = r.growClaim(ctx, pvc, want)
				if err != nil {
					return ctrl.Result{}, err
				}
			}
			if why != "" {
				refused = append(refused, why)
				continue
			}
		}
		if has := pvc.Status.Capacity[corev1.ResourceStorage]; has.Cmp(want) < 0 {
			growing = append(growing, fmt.Sprintf("%s has %s%s", pvc.Name, has.String(), resizeState(pvc)))
		}
	}
	var c metav1.Condition
	var res ctrl.Result
	switch {
	case claims == 0:
		return ctrl.Result{}, nil
	case len(refused) > 0:
		c = cond(v1alpha1.ConditionVolumeExpansion, metav1.ConditionFalse, v1alpha1.ReasonVolumeExpansionNotSupported,
			"spec.storage.embedded.size asks %s, but %s; the volumes keep their size until the StorageClass allows expansion",
			want.String(), strings.Join(refused, "; "))
		res = requeueAfter(recheckStorageClass)
	case len(growing) > 0:
		c = cond(v1alpha1.ConditionVolumeExpansion, metav1.ConditionFalse, v1alpha1.ReasonVolumeExpanding,
			"growing the volumes to %s: %s", want.String(), strings.Join(growing, "; "))
	default:
		c = cond(v1alpha1.ConditionVolumeExpansion, metav1.ConditionTrue, v1alpha1.ReasonVolumesExpanded,
			"every volume has %s", want.String())
	}
	setCondition(t, c)
	return res, nil
}

// isDataClaim reports whether name is one of the Tenant's data volume
// claims, data-<tenant>-bus-<ordinal>.
func isDataClaim(t *v1alpha1.Tenant, name string) bool {
	ordinal, ok := strings.CutPrefix(name, dataVolume+"-"+busName(t)+"-")
	return ok && ordinal != "" && strings.Trim(ordinal, "0123456789") == ""
}

// expansionRefused says why pvc cannot grow, or "" when its StorageClass
// allows it. A StorageClass the operator may not read (it runs with the
// rights of one namespace) is left to the API server to judge.
func (r *TenantWorkloadReconciler) expansionRefused(ctx context.Context, pvc *corev1.PersistentVolumeClaim) (string, error) {
	name := ""
	if pvc.Spec.StorageClassName != nil {
		name = *pvc.Spec.StorageClassName
	}
	if name == "" {
		return fmt.Sprintf("volume claim %s has no StorageClass, so it cannot be expanded", pvc.Name), nil
	}
	sc := &storagev1.StorageClass{}
	err := r.APIReader.Get(ctx, types.NamespacedName{Name: name}, sc)
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Sprintf("StorageClass %s of volume claim %s does not exist", name, pvc.Name), nil
	case apierrors.IsForbidden(err):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("get storageclass %s: %w", name, err)
	case sc.AllowVolumeExpansion == nil || !*sc.AllowVolumeExpansion:
		return fmt.Sprintf("StorageClass %s of volume claim %s does not allow volume expansion (allowVolumeExpansion is not true)", name, pvc.Name), nil
	}
	return "", nil
}

// growClaim asks size of pvc. It returns the API server's reason when it
// refuses (its admission checks the StorageClass too).
func (r *TenantWorkloadReconciler) growClaim(ctx context.Context, pvc *corev1.PersistentVolumeClaim, size resource.Quantity) (string, error) {
	orig := pvc.DeepCopy()
	if pvc.Spec.Resources.Requests == nil {
		pvc.Spec.Resources.Requests = corev1.ResourceList{}
	}
	pvc.Spec.Resources.Requests[corev1.ResourceStorage] = size
	err := r.Patch(ctx, pvc, client.MergeFrom(orig))
	switch {
	case apierrors.IsForbidden(err) || apierrors.IsInvalid(err):
		return fmt.Sprintf("the API server refused to grow volume claim %s: %v", pvc.Name, err), nil
	case err != nil:
		return "", fmt.Errorf("grow volume claim %s: %w", pvc.Name, err)
	}
	return "", nil
}

// resizeState describes the resize conditions of pvc, such as the file
// system resize the kubelet has yet to do.
func resizeState(pvc *corev1.PersistentVolumeClaim) string {
	var states []string
	for _, c := range pvc.Status.Conditions {
		if c.Status == corev1.ConditionTrue && slices.Contains([]corev1.PersistentVolumeClaimConditionType{
			corev1.PersistentVolumeClaimResizing, corev1.PersistentVolumeClaimFileSystemResizePending,
			corev1.PersistentVolumeClaimControllerResizeError, corev1.PersistentVolumeClaimNodeResizeError}, c.Type) {
			s := string(c.Type)
			if c.Message != "" {
				s += ": " + c.Message
			}
			states = append(states, s)
		}
	}
	if len(states) == 0 {
		return ""
	}
	return " (" + strings.Join(states, ", ") + ")"
}

// claimToTenant maps a bus volume claim to its Tenant.
func claimToTenant(_ context.Context, o client.Object) []reconcile.Request {
	return requestsFor(o.GetNamespace(), o.GetLabels()["app.kubernetes.io/instance"])
}
