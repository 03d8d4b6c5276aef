package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// ConditionedObject is implemented by every kind of this package: it lets
// the operator read and write status conditions and the observed generation
// without knowing the kind.
//
// +kubebuilder:object:generate=false
type ConditionedObject interface {
	// GetConditions returns status.conditions.
	GetConditions() []metav1.Condition
	// SetConditions replaces status.conditions.
	SetConditions([]metav1.Condition)
	// SetObservedGeneration sets status.observedGeneration.
	SetObservedGeneration(int64)
}

// GetConditions returns status.conditions.
func (t *Tenant) GetConditions() []metav1.Condition { return t.Status.Conditions }

// SetConditions replaces status.conditions.
func (t *Tenant) SetConditions(c []metav1.Condition) { t.Status.Conditions = c }

// SetObservedGeneration sets status.observedGeneration.
func (t *Tenant) SetObservedGeneration(g int64) { t.Status.ObservedGeneration = g }

// GetConditions returns status.conditions.
func (c *Connection) GetConditions() []metav1.Condition { return c.Status.Conditions }

// SetConditions replaces status.conditions.
func (c *Connection) SetConditions(cs []metav1.Condition) { c.Status.Conditions = cs }

// SetObservedGeneration sets status.observedGeneration.
func (c *Connection) SetObservedGeneration(g int64) { c.Status.ObservedGeneration = g }

// GetConditions returns status.conditions.
func (g *Grant) GetConditions() []metav1.Condition { return g.Status.Conditions }

// SetConditions replaces status.conditions.
func (g *Grant) SetConditions(c []metav1.Condition) { g.Status.Conditions = c }

// SetObservedGeneration sets status.observedGeneration.
func (g *Grant) SetObservedGeneration(gen int64) { g.Status.ObservedGeneration = gen }

// GetConditions returns status.conditions.
func (p *OwnershipPolicy) GetConditions() []metav1.Condition { return p.Status.Conditions }

// SetConditions replaces status.conditions.
func (p *OwnershipPolicy) SetConditions(c []metav1.Condition) { p.Status.Conditions = c }

// SetObservedGeneration sets status.observedGeneration.
func (p *OwnershipPolicy) SetObservedGeneration(g int64) { p.Status.ObservedGeneration = g }

// GetConditions returns status.conditions.
func (p *BusPool) GetConditions() []metav1.Condition { return p.Status.Conditions }

// SetConditions replaces status.conditions.
func (p *BusPool) SetConditions(c []metav1.Condition) { p.Status.Conditions = c }

// SetObservedGeneration sets status.observedGeneration.
func (p *BusPool) SetObservedGeneration(g int64) { p.Status.ObservedGeneration = g }

var (
	_ ConditionedObject = (*BusPool)(nil)
	_ ConditionedObject = (*Tenant)(nil)
	_ ConditionedObject = (*Connection)(nil)
	_ ConditionedObject = (*Grant)(nil)
	_ ConditionedObject = (*OwnershipPolicy)(nil)
)
