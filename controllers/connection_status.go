package controllers

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/storybus/storybus/api/v1alpha1"
)

// refsCondition is the ResolvedRefs condition of a reference check.
func refsCondition(r refsObservation) metav1.Condition {
	if r.reason != "" {
		return cond(v1alpha1.ConditionResolvedRefs, metav1.ConditionFalse, r.reason, "%s", r.message)
	}
	return cond(v1alpha1.ConditionResolvedRefs, metav1.ConditionTrue, v1alpha1.ReasonResolved, "every reference resolved")
}

// connectionConditions returns the conditions the reconcile s decides,
// Ready excluded; rotatedAt is when the credentials Secret says its
// client secret was last made.
func connectionConditions(s *connectionScope, rotatedAt *metav1.Time) []metav1.Condition {
	c := s.conn
	var cs []metav1.Condition
	if s.refs.checked {
		cs = append(cs, refsCondition(s.refs))
	}
	secretName := c.CredentialsSecretName()
	switch {
	case s.inUse != nil:
		cs = append(cs, cond(v1alpha1.ConditionCredentialsReady, metav1.ConditionFalse, v1alpha1.ReasonSecretInUse,
			"%v; name another Secret in spec.credentials.secretName", s.inUse))
	case s.sec == nil:
		cs = append(cs, cond(v1alpha1.ConditionCredentialsReady, metav1.ConditionUnknown, v1alpha1.ReasonReconciling,
			"waiting for Secret %s to be made or filled in", secretName))
	case s.tooShort != nil:
		cs = append(cs, cond(v1alpha1.ConditionCredentialsReady, metav1.ConditionFalse, v1alpha1.ReasonSecretTooShort,
			"Secret %s: %v; the bus refuses it. Put a longer random secret under %s, or remove the key to have one generated",
			secretName, s.tooShort, v1alpha1.CredentialsClientSecretKey))
	case s.owned:
		cs = append(cs, cond(v1alpha1.ConditionCredentialsReady, metav1.ConditionTrue, v1alpha1.ReasonCredentialsGenerated,
			"client %s, credentials in Secret %s", s.sec.Data[v1alpha1.CredentialsClientIDKey], secretName))
	default:
		cs = append(cs, cond(v1alpha1.ConditionCredentialsReady, metav1.ConditionTrue, v1alpha1.ReasonCredentialsReused,
			"client %s, credentials in existing Secret %s", s.sec.Data[v1alpha1.CredentialsClientIDKey], secretName))
	}
	// In force is known once the references were checked and, when they
	// resolved, the Tenant and the Secret were read.
	switch {
	case s.refs.checked && s.refs.reason == "" && s.tenant != nil && s.sec == nil && s.inUse == nil:
		cs = append(cs, cond(v1alpha1.ConditionInForce, metav1.ConditionFalse, v1alpha1.ReasonNotCompiled,
			"generation %d is not yet compiled into Tenant %s's configuration: its credentials Secret %s is not made yet", c.Generation, s.tenant.Name, secretName))
	case s.refs.checked && (s.refs.reason != "" || (s.tenant != nil && s.sec != nil)):
		t := s.tenant
		if t == nil {
			t = &v1alpha1.Tenant{}
		}
		cs = append(cs, inForceCondition(s.refs, t, "Connection", c.Name, c.Generation, rotatedAt))
	}
	return cs
}

// setConnectionStatus writes into the Connection the status its
// reconcile s decides.
func setConnectionStatus(s *connectionScope) {
	c := s.conn
	c.Status.SecretName = c.CredentialsSecretName()
	var rotatedAt *metav1.Time
	if sec := s.sec; sec != nil {
		c.Status.ClientID = string(sec.Data[v1alpha1.CredentialsClientIDKey])
		// The rotation asked is observed once the Secret records it
		// handled (ConnectionCredentialsReconciler).
		if handled, ok := sec.Annotations[v1alpha1.AnnotationRotationHandled]; ok && handled == rotationRequest(c, handled) {
			c.Status.ObservedRotate = c.Spec.Credentials.Rotate
		}
		if at, err := time.Parse(time.RFC3339, sec.Annotations[v1alpha1.AnnotationRotatedAt]); err == nil {
			t := metav1.NewTime(at)
			rotatedAt = &t
		}
		c.Status.CredentialsRotatedAt = rotatedAt
	}
	setConditions(c, c.Generation, connectionConditions(s, rotatedAt), v1alpha1.ConditionResolvedRefs, v1alpha1.ConditionCredentialsReady, v1alpha1.ConditionInForce)
}
