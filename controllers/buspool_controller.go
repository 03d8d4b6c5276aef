package controllers

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/storybus/storybus/api/v1alpha1"
)

// BusPoolReconciler runs a BusPool's replicas: a StatefulSet of
// `storybus serve --pool`, its Services, a PodDisruptionBudget and the
// HTTPRoute or Ingress of spec.expose. It connects to the pool's NATS
// cluster (opening the pool's buckets) and reports the replicas, what
// each has in force, and the cluster's reachability in the pool's status.
type BusPoolReconciler struct {
	objectWriter
	// Secrets reads and watches Secrets (the NATS credentials).
	Secrets *Secrets
	// Recorder records Events on the BusPool.
	Recorder events.EventRecorder
	// Pools holds the connections to the pools' clusters.
	Pools *poolClients
	Options

	// Cache is the manager's cache, which the watch of Prometheus
	// Operator PodMonitors is added to once they exist.
	Cache cache.Cache

	controller controller.Controller
	// podMonitorWatch watches PodMonitors once their CRD exists.
	podMonitorWatch kindWatch
	// gatewayAPI is true when the cluster served HTTPRoute at setup.
	gatewayAPI bool
	// counted remembers when each pool's status was last written.
	counted countThrottle
}

// busPoolScope is what the phases of one reconcile share.
type busPoolScope struct {
	pool *v1alpha1.BusPool
	// conflict is an object in the way, not controlled by the pool.
	conflict error
	// sts is the StatefulSet as cached before this reconcile; nil when
	// there was none.
	sts *appsv1.StatefulSet
	// client is the pool's connection, clusterErr why there is none, and
	// health what it says of itself.
	client     *poolClient
	clusterErr error
	health     string
	// pods are the pool's replica pods.
	pods []corev1.Pod
	// tenants counts the Tenants placed on the pool.
	tenants int32
	// expose is what the expose phase saw; nil without spec.expose.
	expose *poolExposeObservation
	// observed is true once the phases that read the replicas ran.
	observed bool
	// monitorDecided is true once the PodMonitor phase ran, and monitored
	// the Monitored condition it decided (nil: none).
	monitorDecided bool
	monitored      *metav1.Condition
}

// poolExposeObservation is what the expose phase saw of the pool's route.
type poolExposeObservation struct {
	gatewayAPIMissing bool
	parents           []v1alpha1.GatewayParentRef
	route             *gatewayv1.HTTPRoute
	ingress           *networkingv1.Ingress
}

// clusterRecheck is how often a pool whose cluster cannot be reached is
// tried again.
const clusterRecheck = 10 * time.Second

// poolStatusCoalesce gathers the status changes of a pool's replicas into
// one reconcile of the BusPool: its status counts, it does not race them.
const poolStatusCoalesce = time.Second

// +kubebuilder:rbac:groups=bus.storybus.io,resources=buspools,verbs=get;list;watch
// +kubebuilder:rbac:groups=bus.storybus.io,resources=buspools/status,verbs=get;patch
// +kubebuilder:rbac:groups=apps,resources=statefulsets,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch

// Reconcile brings one BusPool's replicas to its spec and reports them.
func (r *BusPoolReconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, err error) {
	p := &v1alpha1.BusPool{}
	if err := r.Get(ctx, req.NamespacedName, p); err != nil {
		if apierrors.IsNotFound(err) {
			r.Pools.forget(req.NamespacedName)
			r.counted.forget(req.NamespacedName)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("get buspool: %w", err)
	}
	if !p.DeletionTimestamp.IsZero() {
		// Its objects go with it through their owner references; its
		// buckets, and the placed workspaces' data, stay on the cluster.
		r.Pools.forget(req.NamespacedName)
		return ctrl.Result{}, nil
	}
	before := p.DeepCopy()
	s := &busPoolScope{pool: p}
	defer func() {
		s.setStatus(r.ClusterDomain)
		now := r.Now()
		if wait := r.counted.wait(req.NamespacedName, &before.Status, &p.Status, now); wait > 0 && err == nil {
			res = lowestNonZeroResult(res, requeueAfter(wait))
			return
		}
		changed := !equality.Semantic.DeepEqual(before.Status, p.Status)
		_, perr := patchStatus(ctx, r.Client, r.Recorder, p, before, nil)
		if err = errors.Join(err, perr); err == nil && changed {
			r.counted.wrote(req.NamespacedName, now)
		}
	}()
	return doReconcile(ctx, s,
		r.reconcileServices,
		r.reconcileStatefulSet,
		r.reconcilePDB,
		r.reconcileExpose,
		r.reconcileNetworkPolicy,
		r.reconcilePodMonitor,
		r.observeCluster,
		r.observeReplicas,
	)
}

// write server-side applies desired as the pool's object of kind named
// name, unless it already holds it, and returns the object as it was (nil
// when there was none). An object of that name the pool does not control
// stops the reconcile: the operator never adopts it.
func (r *BusPoolReconciler) write(ctx context.Context, s *busPoolScope, kind, name string, obj client.Object, desired runtime.ApplyConfiguration) (client.Object, error) {
	cur, err := r.owned(ctx, s, kind, name, obj)
	if err != nil {
		return nil, err
	}
	_, err = r.apply(ctx, cur, desired, strings.ToLower(kind)+" "+name)
	return cur, err
}

// owned reads the pool's object of kind named name into obj and returns
// it, nil when there is none; the cache holds only what the operator
// labels, so a name it lacks is read from the API server.
func (r *BusPoolReconciler) owned(ctx context.Context, s *busPoolScope, kind, name string, obj client.Object) (client.Object, error) {
	key := types.NamespacedName{Namespace: s.pool.Namespace, Name: name}
	err := r.Get(ctx, key, obj)
	if apierrors.IsNotFound(err) {
		err = r.APIReader.Get(ctx, key, obj)
	}
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("get %s %s: %w", kind, name, err)
	case !controlledBy(obj, s.pool):
		s.conflict = fmt.Errorf("%s %s exists and is not controlled by BusPool %s", kind, name, s.pool.Name)
		return nil, terminal(s.conflict)
	}
	return obj, nil
}

func (r *BusPoolReconciler) reconcileServices(ctx context.Context, s *busPoolScope) (ctrl.Result, error) {
	p := s.pool
	if _, err := r.write(ctx, s, "Service", poolObjectName(p), &corev1.Service{}, desiredPoolService(p)); err != nil {
		return ctrl.Result{}, err
	}
	_, err := r.write(ctx, s, "Service", poolOpsName(p), &corev1.Service{}, desiredPoolOpsService(p))
	return ctrl.Result{}, err
}

func (r *BusPoolReconciler) reconcileStatefulSet(ctx context.Context, s *busPoolScope) (ctrl.Result, error) {
	sts := &appsv1.StatefulSet{}
	cur, err := r.write(ctx, s, "StatefulSet", poolObjectName(s.pool), sts, desiredPoolStatefulSet(s.pool, r.Options))
	if cur != nil {
		s.sts = sts
	}
	return ctrl.Result{}, err
}

func (r *BusPoolReconciler) reconcilePDB(ctx context.Context, s *busPoolScope) (ctrl.Result, error) {
	_, err := r.write(ctx, s, "PodDisruptionBudget", poolObjectName(s.pool), &policyv1.PodDisruptionBudget{}, desiredPoolPDB(s.pool))
	return ctrl.Result{}, err
}

// +kubebuilder:rbac:groups=gateway.networking.k8s.io,resources=httproutes,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=networking.k8s.io,resources=ingresses,verbs=get;list;watch;create;patch;delete

// reconcileExpose writes the HTTPRoute or Ingress spec.expose asks for and
// deletes the one (or both) the pool no longer wants.
func (r *BusPoolReconciler) reconcileExpose(ctx context.Context, s *busPoolScope) (ctrl.Result, error) {
	p := s.pool
	ex := p.Spec.Expose
	wantRoute, wantIngress := ex != nil && ex.Gateway != nil, ex != nil && ex.Ingress != nil
	if r.gatewayAPI && !wantRoute {
		if err := r.deleteControlled(ctx, p, &gatewayv1.HTTPRoute{}); err != nil {
			return ctrl.Result{}, err
		}
	}
	if !wantIngress {
		if err := r.deleteControlled(ctx, p, &networkingv1.Ingress{}); err != nil {
			return ctrl.Result{}, err
		}
	}
	switch {
	case wantRoute:
		s.expose = &poolExposeObservation{}
		if !r.gatewayAPI {
			s.expose.gatewayAPIMissing = true
			return ctrl.Result{}, nil
		}
		parents := ex.Gateway.ParentRefs
		if len(parents) == 0 && r.Expose.Gateway != nil {
			parents = []v1alpha1.GatewayParentRef{*r.Expose.Gateway}
		}
		s.expose.parents = parents
		route := &gatewayv1.HTTPRoute{}
		cur, err := r.owned(ctx, s, "HTTPRoute", poolObjectName(p), route)
		if err != nil || len(parents) == 0 {
			return ctrl.Result{}, err
		}
		if _, err := r.apply(ctx, cur, desiredPoolHTTPRoute(p, parents), "httproute"); err != nil {
			return ctrl.Result{}, err
		}
		if cur != nil {
			s.expose.route = route
		}
	case wantIngress:
		s.expose = &poolExposeObservation{}
		ing := &networkingv1.Ingress{}
		cur, err := r.write(ctx, s, "Ingress", poolObjectName(p), ing, desiredPoolIngress(p))
		if err != nil {
			return ctrl.Result{}, err
		}
		if cur != nil {
			s.expose.ingress = ing
		}
	}
	return ctrl.Result{}, nil
}

// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=get;list;watch;create;patch;delete

// reconcileNetworkPolicy applies the pool's NetworkPolicy (its
// spec.networkPolicy, egress to its NATS servers), or deletes the one it
// controls when the pool no longer wants it.
func (r *BusPoolReconciler) reconcileNetworkPolicy(ctx context.Context, s *busPoolScope) (ctrl.Result, error) {
	p := s.pool
	np := &networkingv1.NetworkPolicy{}
	if !p.NetworkPolicyEnabled(r.NetworkPolicy.Enabled) {
		return ctrl.Result{}, r.deleteControlled(ctx, p, np)
	}
	_, err := r.write(ctx, s, "NetworkPolicy", poolObjectName(p), np, poolFront(p).networkPolicy(p.Spec.NetworkPolicy, p.Spec.NATS.URL, r.NetworkPolicy))
	return ctrl.Result{}, err
}

// +kubebuilder:rbac:groups=monitoring.coreos.com,resources=podmonitors,verbs=get;list;watch;create;patch;delete

// reconcilePodMonitor writes or removes the pool's PodMonitor and decides
// its Monitored condition, as a Tenant's (tenant_monitoring.go).
func (r *BusPoolReconciler) reconcilePodMonitor(ctx context.Context, s *busPoolScope) (ctrl.Result, error) {
	p := s.pool
	s.monitorDecided = true
	want := p.PodMonitorEnabled(r.Monitoring.PodMonitor)
	if !want && meta.FindStatusCondition(p.Status.Conditions, v1alpha1.ConditionMonitored) == nil {
		return ctrl.Result{}, nil
	}
	_, err := r.RESTMapper().RESTMapping(podMonitorGVK.GroupKind(), podMonitorGVK.Version)
	switch {
	case meta.IsNoMatchError(err):
		if want {
			c := cond(v1alpha1.ConditionMonitored, metav1.ConditionFalse, v1alpha1.ReasonPrometheusOperatorNotInstalled,
				"a PodMonitor is wanted, and the Prometheus Operator's CustomResourceDefinitions (podmonitors.monitoring.coreos.com/v1) are not installed")
			s.monitored = &c
			return requeueAfter(crdRecheck), nil
		}
		return ctrl.Result{}, nil
	case err != nil:
		return ctrl.Result{}, fmt.Errorf("look up podmonitors.monitoring.coreos.com: %w", err)
	}
	if err := r.podMonitorWatch.start(ctx, r.controller, r.Cache, r.Client, &v1alpha1.BusPool{}, podMonitorGVK); err != nil {
		return ctrl.Result{}, fmt.Errorf("watch podmonitors: %w", err)
	}
	cur := &unstructured.Unstructured{}
	cur.SetGroupVersionKind(podMonitorGVK)
	if !want {
		return ctrl.Result{}, r.deleteControlled(ctx, p, cur)
	}
	desired := poolFront(p).podMonitor(p.Spec.Monitoring, r.Monitoring, "pool")
	if _, err := r.write(ctx, s, "PodMonitor", poolObjectName(p), cur, client.ApplyConfigurationFromUnstructured(desired)); err != nil {
		return ctrl.Result{}, err
	}
	c := cond(v1alpha1.ConditionMonitored, metav1.ConditionTrue, v1alpha1.ReasonPodMonitorWritten,
		"PodMonitor %s scrapes the replicas' /metrics", poolObjectName(p))
	s.monitored = &c
	return ctrl.Result{}, nil
}

// deleteControlled deletes the pool's object of obj's kind, named like the
// pool's StatefulSet, when the pool controls it.
func (r *BusPoolReconciler) deleteControlled(ctx context.Context, p *v1alpha1.BusPool, obj client.Object) error {
	return deleteIfControlled(ctx, r.Client, p, poolObjectName(p), obj)
}

// observeCluster connects to the pool's cluster, opening its buckets. A
// cluster that cannot be reached is reported, not returned: the replicas
// and their Services are there meanwhile.
func (r *BusPoolReconciler) observeCluster(ctx context.Context, s *busPoolScope) (ctrl.Result, error) {
	s.client, s.clusterErr = r.Pools.forPool(ctx, r.Secrets, s.pool)
	if s.clusterErr == nil {
		s.health, s.clusterErr = s.client.health()
	}
	if s.clusterErr != nil {
		return requeueAfter(clusterRecheck), nil
	}
	return ctrl.Result{}, nil
}

// observeReplicas reads the pool's pods and counts its placed Tenants.
func (r *BusPoolReconciler) observeReplicas(ctx context.Context, s *busPoolScope) (ctrl.Result, error) {
	p := s.pool
	var pods corev1.PodList
	if err := r.List(ctx, &pods, client.InNamespace(p.Namespace), client.MatchingLabels{LabelPool: p.Name, LabelManagedBy: FieldManager}); err != nil {
		return ctrl.Result{}, fmt.Errorf("list pool pods: %w", err)
	}
	s.pods = pods.Items
	n, err := tenantsPlacedOn(ctx, r.Cache, r.Client, types.NamespacedName{Namespace: p.Namespace, Name: p.Name})
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("count the tenants placed on the pool: %w", err)
	}
	s.tenants = int32(n)
	s.observed = true
	return ctrl.Result{}, nil
}

// setStatus writes what the reconcile observed into the pool's status.
func (s *busPoolScope) setStatus(clusterDomain string) {
	p := s.pool
	p.Status.PoolName = p.PoolName()
	p.Status.Endpoint = poolEndpoint(p, clusterDomain)
	p.Status.ExternalEndpoint = poolExternalEndpoint(p)
	p.Status.Replicas = p.EffectiveReplicas()
	if s.sts != nil {
		p.Status.ReadyReplicas = s.sts.Status.ReadyReplicas
	}
	var cs []metav1.Condition
	switch {
	case s.clusterErr != nil:
		cs = append(cs, cond(v1alpha1.ConditionClusterReady, metav1.ConditionFalse, v1alpha1.ReasonClusterUnreachable, "%v", s.clusterErr))
	case s.client != nil:
		cs = append(cs, cond(v1alpha1.ConditionClusterReady, metav1.ConditionTrue, v1alpha1.ReasonClusterConnected, "%s", s.health))
	}
	if s.conflict != nil {
		cs = append(cs, nameConflictCondition(v1alpha1.ConditionAvailable, s.conflict))
	} else if s.observed {
		p.Status.Tenants = s.tenants
		p.Status.ReplicaStatuses = replicaStatuses(s.pods, s.client)
		cs = append(cs, poolAvailable(p, s.pods))
	}
	if s.monitored != nil {
		cs = append(cs, *s.monitored)
	} else if s.monitorDecided {
		meta.RemoveStatusCondition(&p.Status.Conditions, v1alpha1.ConditionMonitored)
	}
	if s.expose != nil {
		cs = append(cs, poolExposedCondition(p, s.expose))
	} else if p.Spec.Expose == nil {
		meta.RemoveStatusCondition(&p.Status.Conditions, v1alpha1.ConditionExposed)
	}
	setConditions(p, p.Generation, cs, v1alpha1.ConditionClusterReady, v1alpha1.ConditionAvailable)
}

// replicaStatuses summarises, for each replica pod in name order, its
// readiness and what it reports in the status bucket.
func replicaStatuses(pods []corev1.Pod, pc *poolClient) []v1alpha1.BusPoolReplicaStatus {
	var counts map[string]replicaCounts
	if pc != nil {
		counts, _ = pc.counts()
	}
	var out []v1alpha1.BusPoolReplicaStatus
	for i := range pods {
		pod := &pods[i]
		n := counts[pod.Name]
		out = append(out, v1alpha1.BusPoolReplicaStatus{Name: pod.Name, Ready: podReady(pod), Workspaces: n.workspaces, Refused: n.refused})
	}
	slices.SortFunc(out, func(a, b v1alpha1.BusPoolReplicaStatus) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// poolAvailable is the pool's Available condition: whether its desired
// replicas are ready.
func poolAvailable(p *v1alpha1.BusPool, pods []corev1.Pod) metav1.Condition {
	desired, ready := p.Status.Replicas, p.Status.ReadyReplicas
	switch {
	case ready >= desired:
		return cond(v1alpha1.ConditionAvailable, metav1.ConditionTrue, v1alpha1.ReasonReplicasReady,
			"%d/%d replicas ready at %s, serving %d Tenant(s)", ready, desired, p.Status.Endpoint, p.Status.Tenants)
	case p.Status.Tenants == 0 && ready == 0:
		return cond(v1alpha1.ConditionAvailable, metav1.ConditionFalse, v1alpha1.ReasonAwaitingTenants,
			"no Tenant is placed on the pool yet: a replica is ready once it serves a workspace (0/%d ready)", desired)
	}
	if problems := podProblems(pods, nil); len(problems) > 0 {
		return cond(v1alpha1.ConditionAvailable, metav1.ConditionFalse, v1alpha1.ReasonReplicasNotReady,
			"%d/%d replicas ready: %s", ready, desired, strings.Join(problems, "; "))
	}
	return cond(v1alpha1.ConditionAvailable, metav1.ConditionFalse, v1alpha1.ReasonReplicasNotReady, "%d/%d replicas ready", ready, desired)
}

// poolExposedCondition is the pool's Exposed condition: what the Gateway
// or ingress controller made of its route. It does not count towards
// Ready: the pool serves inside the cluster meanwhile.
func poolExposedCondition(p *v1alpha1.BusPool, o *poolExposeObservation) metav1.Condition {
	name := poolObjectName(p)
	if p.Spec.Expose.Ingress != nil {
		if o.ingress != nil {
			for _, lb := range o.ingress.Status.LoadBalancer.Ingress {
				if addr := cmp.Or(lb.IP, lb.Hostname); addr != "" {
					return cond(v1alpha1.ConditionExposed, metav1.ConditionTrue, v1alpha1.ReasonIngressAdmitted,
						"Ingress %s serves %s%s at load balancer %s", name, p.Spec.Expose.Ingress.Host, poolPathPrefix, addr)
				}
			}
		}
		return cond(v1alpha1.ConditionExposed, metav1.ConditionFalse, v1alpha1.ReasonIngressPending,
			"Ingress %s has no load-balancer address yet: is an ingress controller serving its class?", name)
	}
	switch {
	case o.gatewayAPIMissing:
		return cond(v1alpha1.ConditionExposed, metav1.ConditionFalse, v1alpha1.ReasonGatewayAPINotInstalled,
			"the cluster has no Gateway API HTTPRoute kind (%s/%s): install the Gateway API CRDs, then restart the operator", gatewayv1.GroupName, gatewayv1.GroupVersion.Version)
	case len(o.parents) == 0:
		return cond(v1alpha1.ConditionExposed, metav1.ConditionFalse, v1alpha1.ReasonNoGateway,
			"spec.expose.gateway names no parentRefs and the operator has no default Gateway (--expose-gateway)")
	}
	var pending, refused []string
	for _, parent := range o.parents {
		gw := cmp.Or(parent.Namespace, p.Namespace) + "/" + parent.Name
		var st *gatewayv1.RouteParentStatus
		if o.route != nil {
			for i := range o.route.Status.Parents {
				ref := o.route.Status.Parents[i].ParentRef
				ns, section := p.Namespace, ""
				if ref.Namespace != nil {
					ns = string(*ref.Namespace)
				}
				if ref.SectionName != nil {
					section = string(*ref.SectionName)
				}
				if string(ref.Name) == parent.Name && ns == cmp.Or(parent.Namespace, p.Namespace) && section == parent.SectionName {
					st = &o.route.Status.Parents[i]
				}
			}
		}
		if st == nil {
			pending = append(pending, gw)
			continue
		}
		for _, ct := range []gatewayv1.RouteConditionType{gatewayv1.RouteConditionAccepted, gatewayv1.RouteConditionResolvedRefs} {
			c := meta.FindStatusCondition(st.Conditions, string(ct))
			switch {
			case c == nil || c.Status == metav1.ConditionUnknown:
				pending = append(pending, gw)
			case c.Status == metav1.ConditionFalse:
				refused = append(refused, fmt.Sprintf("%s: %s %s (%s) %s", gw, ct, c.Status, c.Reason, c.Message))
			}
		}
	}
	switch {
	case len(refused) > 0:
		return cond(v1alpha1.ConditionExposed, metav1.ConditionFalse, v1alpha1.ReasonRouteNotAccepted, "HTTPRoute %s: %s", name, strings.Join(refused, "; "))
	case len(pending) > 0:
		return cond(v1alpha1.ConditionExposed, metav1.ConditionFalse, v1alpha1.ReasonRoutePending,
			"HTTPRoute %s awaits the controller of Gateway %s", name, strings.Join(slices.Compact(pending), ", "))
	}
	return cond(v1alpha1.ConditionExposed, metav1.ConditionTrue, v1alpha1.ReasonRouteAccepted,
		"HTTPRoute %s sends %s to the pool; accepted by %d Gateway(s)", name, poolPathPrefix, len(o.parents))
}

// SetupWithManager registers the reconciler and its watches: the pool's
// spec, the objects it writes (the StatefulSet's status: its ready
// replicas), its pods, the Tenants placed on it, its NATS credentials
// Secret, and every change its replicas report in the status bucket.
func (r *BusPoolReconciler) SetupWithManager(mgr ctrl.Manager) error {
	var err error
	if r.gatewayAPI, err = gatewayAPIInstalled(mgr.GetRESTMapper()); err != nil {
		return err
	}
	generation := builder.WithPredicates(predicate.GenerationChangedPredicate{})
	b := r.Secrets.Watch(ctrl.NewControllerManagedBy(mgr).Named("buspool"), r.poolsOfSecret, nil)
	if r.gatewayAPI {
		b = b.Owns(&gatewayv1.HTTPRoute{})
	}
	c, err := b.
		For(&v1alpha1.BusPool{}, builder.WithPredicates(specChanged)).
		Owns(&appsv1.StatefulSet{}).
		Owns(&corev1.Service{}, generation).
		Owns(&policyv1.PodDisruptionBudget{}, generation).
		Owns(&networkingv1.Ingress{}).
		Owns(&networkingv1.NetworkPolicy{}, generation).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			return requestsFor(o.GetNamespace(), o.GetLabels()[LabelPool])
		})).
		Watches(&v1alpha1.Tenant{}, handler.EnqueueRequestsFromMapFunc(poolsOfTenant), builder.WithPredicates(tenantPlacementChanged)).
		WatchesRawSource(source.Channel(r.Pools.poolEvents, coalesced(newCoalescer(poolStatusCoalesce, poolStatusCoalesce, poolStatusCoalesce), func(_ context.Context, ev poolEvent) []reconcile.Request {
			return []reconcile.Request{{NamespacedName: ev.pool}}
		}))).
		Build(observed{kind: "BusPool", inner: r})
	r.controller = c
	return err
}

// poolsOfSecret maps a Secret to the BusPools whose NATS credentials or
// TLS key pair it holds.
func (r *BusPoolReconciler) poolsOfSecret(ctx context.Context, o client.Object) []reconcile.Request {
	var l v1alpha1.BusPoolList
	if err := r.List(ctx, &l, client.InNamespace(o.GetNamespace()), client.MatchingFields{indexPoolSecrets: o.GetName()}); err != nil {
		return nil
	}
	var names []string
	for _, p := range l.Items {
		names = append(names, p.Name)
	}
	return requestsFor(o.GetNamespace(), names...)
}

// poolsOfTenant maps a Tenant to the pools it names and is placed on.
func poolsOfTenant(_ context.Context, o client.Object) []reconcile.Request {
	t := o.(*v1alpha1.Tenant)
	var out []reconcile.Request
	if ns, name, ok := t.PoolKey(); ok {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}})
	}
	if pl := t.Status.Pool; pl != nil {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: pl.Namespace, Name: pl.Name}})
	}
	return out
}

// tenantPlacementChanged passes the Tenant events that can change a
// pool's count of placed Tenants.
var tenantPlacementChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		old, cur := e.ObjectOld.(*v1alpha1.Tenant), e.ObjectNew.(*v1alpha1.Tenant)
		return specChanged.Update(e) || (old.Status.Pool == nil) != (cur.Status.Pool == nil) ||
			old.Status.Pool != nil && cur.Status.Pool != nil && (old.Status.Pool.Name != cur.Status.Pool.Name || old.Status.Pool.Namespace != cur.Status.Pool.Namespace)
	},
}

// poolCountsEvery is how often, at most, a pool's status is written when
// only its counts changed (the Tenants placed, the workspaces each
// replica serves or refused): while hundreds of Tenants are placed at
// once, they changed with every replica's report, and writing each was a
// thousand writes of the pool's status at 1,000 Tenants. A change of
// anything else (a replica ready or gone, a condition) is written at once,
// and each Tenant's own status says at once what the replicas serve.
const poolCountsEvery = 5 * time.Second

// countThrottle remembers when each pool's status was last written.
type countThrottle struct {
	mu   sync.Mutex
	last map[types.NamespacedName]time.Time
}

// wait returns how much longer pool's status, which changed from before
// to now, should wait before it is written: 0 unless only its counts
// changed within poolCountsEvery of its last write.
func (c *countThrottle) wait(pool types.NamespacedName, before, now *v1alpha1.BusPoolStatus, at time.Time) time.Duration {
	if equality.Semantic.DeepEqual(before, now) || !equality.Semantic.DeepEqual(withoutCounts(before), withoutCounts(now)) {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return max(0, poolCountsEvery-at.Sub(c.last[pool]))
}

// wrote records that pool's status was written at.
func (c *countThrottle) wrote(pool types.NamespacedName, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.last == nil {
		c.last = map[types.NamespacedName]time.Time{}
	}
	c.last[pool] = at
}

// forget drops what is remembered of a pool that is gone.
func (c *countThrottle) forget(pool types.NamespacedName) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.last, pool)
}

// withoutCounts is a copy of st without the counts that change as
// Tenants are placed and replicas take their documents up, and without
// the messages of Available and Ready, which quote the Tenants served.
func withoutCounts(st *v1alpha1.BusPoolStatus) *v1alpha1.BusPoolStatus {
	out := st.DeepCopy()
	out.Tenants = 0
	for i := range out.ReplicaStatuses {
		out.ReplicaStatuses[i].Workspaces, out.ReplicaStatuses[i].Refused = 0, 0
	}
	for i := range out.Conditions {
		if c := &out.Conditions[i]; c.Type == v1alpha1.ConditionAvailable || c.Type == v1alpha1.ConditionReady {
			c.Message = ""
		}
	}
	return out
}
