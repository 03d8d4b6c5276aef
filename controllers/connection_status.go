package controllers

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/storybus/storybus/api/v1alpha1"
)

// connectionObservation is what one reconcile of a Connection saw.
type connectionObservation struct {
	generation int64
	refs       refsObservation
	// secretName is the credentials Secret; secretSeen is true when the
	// credentials phase read or made it.
	secretName string
	secretSeen bool
	owned      bool
	inUse      error
	tooShort   error
	clientID   string
	rotatedAt  *time.Time
	rotate     int64
	// inForce is the InForce condition; nil when the references were not
	// checked.
	inForce *metav1.Condition
}

func observeConnection(s *connectionScope) connectionObservation {
	c := s.conn
	o := connectionObservation{
		generation: c.Generation,
		refs:       s.refs,
		secretName: c.CredentialsSecretName(),
		inUse:      s.inUse,
		tooShort:   s.tooShort,
		rotate:     c.Spec.Credentials.Rotate,
	}
	if sec := s.sec; sec != nil {
		o.secretSeen, o.owned = true, s.owned
		o.clientID = string(sec.Data[v1alpha1.CredentialsClientIDKey])
		if at, err := time.Parse(time.RFC3339, sec.Annotations[v1alpha1.AnnotationRotatedAt]); err == nil {
			o.rotatedAt = &at
		}
	}
	if s.refs.checked && (s.tenant != nil || s.refs.reason != "") && (s.sec != nil || s.refs.reason != "") {
		var at *metav1.Time
		if o.rotatedAt != nil {
			t := metav1.NewTime(*o.rotatedAt)
			at = &t
		}
		t := s.tenant
		if t == nil {
			t = &v1alpha1.Tenant{}
		}
		c := inForceCondition(s.refs, t, "Connection", c.Name, c.Generation, at)
		o.inForce = &c
	}
	return o
}

// refsCondition is the ResolvedRefs condition of a reference check.
func refsCondition(r refsObservation) metav1.Condition {
	if r.reason != "" {
		return cond(v1alpha1.ConditionResolvedRefs, metav1.ConditionFalse, r.reason, "%s", r.message)
	}
	return cond(v1alpha1.ConditionResolvedRefs, metav1.ConditionTrue, v1alpha1.ReasonResolved, "every reference resolved")
}

// connectionConditions returns the conditions o decides, Ready excluded.
func connectionConditions(o connectionObservation) []metav1.Condition {
	var cs []metav1.Condition
	if o.refs.checked {
		cs = append(cs, refsCondition(o.refs))
	}
	switch {
	case o.inUse != nil:
		cs = append(cs, cond(v1alpha1.ConditionCredentialsReady, metav1.ConditionFalse, v1alpha1.ReasonSecretInUse,
			"%v; name another Secret in spec.credentials.secretName", o.inUse))
	case !o.secretSeen:
	case o.tooShort != nil:
		cs = append(cs, cond(v1alpha1.ConditionCredentialsReady, metav1.ConditionFalse, v1alpha1.ReasonSecretTooShort,
			"Secret %s: %v; the bus refuses it. Put a longer random secret under %s, or remove the key to have one generated",
			o.secretName, o.tooShort, v1alpha1.CredentialsClientSecretKey))
	case o.owned:
		cs = append(cs, cond(v1alpha1.ConditionCredentialsReady, metav1.ConditionTrue, v1alpha1.ReasonCredentialsGenerated,
			"client %s, credentials in Secret %s", o.clientID, o.secretName))
	default:
		cs = append(cs, cond(v1alpha1.ConditionCredentialsReady, metav1.ConditionTrue, v1alpha1.ReasonCredentialsReused,
			"client %s, credentials in existing Secret %s", o.clientID, o.secretName))
	}
	if o.inForce != nil {
		cs = append(cs, *o.inForce)
	}
	return cs
}

// applyConnectionStatus writes the status o decides into c.
func applyConnectionStatus(c *v1alpha1.Connection, o connectionObservation) {
	if o.secretSeen {
		c.Status.ClientID = o.clientID
		c.Status.SecretName = o.secretName
		c.Status.ObservedRotate = o.rotate
		if o.rotatedAt != nil {
			at := metav1.NewTime(*o.rotatedAt)
			c.Status.CredentialsRotatedAt = &at
		} else {
			c.Status.CredentialsRotatedAt = nil
		}
	}
	setConditions(c, o.generation, connectionConditions(o), v1alpha1.ConditionResolvedRefs, v1alpha1.ConditionCredentialsReady, v1alpha1.ConditionInForce)
}
