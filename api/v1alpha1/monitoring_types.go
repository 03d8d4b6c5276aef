package v1alpha1

// TenantMonitoring says how Prometheus finds the Tenant's bus pods.
type TenantMonitoring struct {
	// PodMonitor has the operator write a Prometheus Operator PodMonitor
	// that scrapes /metrics on the bus pods' operations port. Default: the
	// operator's --pod-monitor.
	// +optional
	PodMonitor *TenantPodMonitor `json:"podMonitor,omitempty"`
}

// TenantPodMonitor is the PodMonitor of a Tenant's bus pods. It is only
// written where the cluster serves monitoring.coreos.com/v1 PodMonitor.
type TenantPodMonitor struct {
	// Enabled writes the PodMonitor (true) or removes it (false). Default:
	// the operator's --pod-monitor.
	// +optional
	Enabled *bool `json:"enabled,omitempty"`
	// Interval is the scrape interval, such as 30s. Default: the
	// operator's --pod-monitor-interval, else Prometheus's own.
	// +kubebuilder:validation:Pattern=`^(0|(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$`
	// +kubebuilder:validation:MaxLength=32
	// +optional
	Interval string `json:"interval,omitempty"`
	// Labels are added to the PodMonitor's labels, over the operator's
	// --pod-monitor-labels: those a Prometheus selects its PodMonitors by
	// (release: kube-prometheus-stack, for one).
	// +kubebuilder:validation:MaxProperties=32
	// +optional
	Labels map[string]string `json:"labels,omitempty"`
}

// PodMonitorEnabled says whether the Tenant's PodMonitor is written,
// given the operator's default.
func (t *Tenant) PodMonitorEnabled(operatorDefault bool) bool {
	return t.Spec.Monitoring.podMonitorEnabled(operatorDefault)
}

// podMonitorEnabled is m's podMonitor.enabled, the operator's default when
// m does not say.
func (m *TenantMonitoring) podMonitorEnabled(operatorDefault bool) bool {
	if m != nil && m.PodMonitor != nil && m.PodMonitor.Enabled != nil {
		return *m.PodMonitor.Enabled
	}
	return operatorDefault
}

// ConditionMonitored is a Tenant's condition while its PodMonitor is
// wanted: True when the PodMonitor is written, False when the cluster has
// no PodMonitor kind. Absent otherwise. It does not count towards Ready:
// the bus serves whether or not it is scraped.
const ConditionMonitored = "Monitored"

// Reasons of ConditionMonitored.
const (
	// ReasonPodMonitorWritten: the PodMonitor is written.
	ReasonPodMonitorWritten = "PodMonitorWritten"
	// ReasonPrometheusOperatorNotInstalled: a PodMonitor is wanted and
	// the cluster has no monitoring.coreos.com/v1 PodMonitor kind.
	ReasonPrometheusOperatorNotInstalled = "PrometheusOperatorNotInstalled"
)
