package kubernetes

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gantryhq/gantry/workspace/provider"
)

// TestNetworkPolicyPerWorkspace: Start makes a NetworkPolicy for the
// workspace's Pod that admits ingress only from the server (the configured
// peers), only to its PORT, and so denies every other ingress (another
// owner's Pod included); Stop removes it with the Pod.
//
// The simulated cluster (an API server with kwok nodes) stores the policy
// but has no network plugin that enforces it: this test checks that the
// object exists and is shaped right, not that packets are dropped. On a
// cluster whose network plugin enforces NetworkPolicy (Calico, Cilium,
// …), this shape is what keeps another owner's Pod off the workspace's port.
func TestNetworkPolicyPerWorkspace(t *testing.T) {
	c := newTestCluster(t)
	cfg := c.config()
	cfg.ServerPeers = ServerPeers{NamespaceLabels: map[string]string{"kubernetes.io/metadata.name": "gantry-system"},
		PodLabels: map[string]string{"app.kubernetes.io/name": "gantry"}, CIDRs: []string{"10.1.2.3/32"}}
	p := c.provider(cfg)
	ctx := t.Context()
	for _, id := range []string{"pol-a", "pol-b"} {
		if err := p.Provision(ctx, id); err != nil {
			t.Fatal(err)
		}
		if err := p.Start(ctx, provider.Spec{ID: id, Owner: "alice"}); err != nil {
			t.Fatal(err)
		}
	}
	pols := c.cli.NetworkingV1().NetworkPolicies(c.ns)
	np, err := pols.Get(ctx, PolicyName("pol-a"), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("NetworkPolicy of a started workspace: %v", err)
	}
	s := np.Spec
	if got := s.PodSelector.MatchLabels; len(got) != 2 || got[LabelWorkspaceID] != "pol-a" || got[LabelRole] != RoleWorkspace {
		t.Errorf("pod selector %v; want exactly the workspace's Pod", got)
	}
	if len(s.PolicyTypes) != 1 || s.PolicyTypes[0] != networkingv1.PolicyTypeIngress {
		t.Errorf("policy types %v; want [Ingress] (every ingress not listed denied)", s.PolicyTypes)
	}
	if len(s.Ingress) != 1 {
		t.Fatalf("ingress rules %+v; want one", s.Ingress)
	}
	r := s.Ingress[0]
	if len(r.Ports) != 1 || r.Ports[0].Port == nil || r.Ports[0].Port.IntValue() != ContainerPort || r.Ports[0].Protocol == nil || *r.Ports[0].Protocol != corev1.ProtocolTCP {
		t.Errorf("ingress ports %+v; want TCP %d only", r.Ports, ContainerPort)
	}
	if len(r.From) != 2 {
		t.Fatalf("ingress from %+v; want the server's pods and its IP block", r.From)
	}
	if f := r.From[0]; f.PodSelector == nil || f.PodSelector.MatchLabels["app.kubernetes.io/name"] != "gantry" ||
		f.NamespaceSelector == nil || f.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != "gantry-system" || f.IPBlock != nil {
		t.Errorf("first peer %+v; want the server's pods in its namespace", f)
	}
	if f := r.From[1]; f.IPBlock == nil || f.IPBlock.CIDR != "10.1.2.3/32" || f.PodSelector != nil || f.NamespaceSelector != nil {
		t.Errorf("second peer %+v; want the server's IP block", f)
	}
	if np.Labels[LabelWorkspaceID] != "pol-a" || np.Labels[LabelManagedBy] != ManagedBy {
		t.Errorf("policy labels %v", np.Labels)
	}

	// A second Start keeps one policy; Stop removes it, and only its own.
	if err := p.Start(ctx, provider.Spec{ID: "pol-a", Owner: "alice"}); err != nil {
		t.Fatal(err)
	}
	if err := p.Stop(ctx, "pol-a"); err != nil {
		t.Fatal(err)
	}
	if _, err := pols.Get(ctx, PolicyName("pol-a"), metav1.GetOptions{}); !isNotFound(err) {
		t.Fatalf("NetworkPolicy after Stop: %v; want it gone", err)
	}
	if _, err := pols.Get(ctx, PolicyName("pol-b"), metav1.GetOptions{}); err != nil {
		t.Fatalf("the other workspace's NetworkPolicy after Stop of the first: %v", err)
	}
	if err := p.Stop(ctx, "pol-a"); err != nil {
		t.Fatalf("second Stop (no policy left): %v", err)
	}
}

// TestNetworkPolicyDefaultPeers: without ServerPeers, the policy admits
// the Pods labelled DefaultServerLabels in the workspaces' namespace.
func TestNetworkPolicyDefaultPeers(t *testing.T) {
	c := newTestCluster(t)
	p := c.provider(c.config())
	ctx := t.Context()
	if err := p.Provision(ctx, "pol-d"); err != nil {
		t.Fatal(err)
	}
	if err := p.Start(ctx, provider.Spec{ID: "pol-d"}); err != nil {
		t.Fatal(err)
	}
	np, err := c.cli.NetworkingV1().NetworkPolicies(c.ns).Get(ctx, PolicyName("pol-d"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	from := np.Spec.Ingress[0].From
	if len(from) != 1 || from[0].PodSelector == nil || from[0].NamespaceSelector != nil ||
		from[0].PodSelector.MatchLabels["app.kubernetes.io/name"] != DefaultServerLabels["app.kubernetes.io/name"] {
		t.Fatalf("default peers %+v; want the pods labelled %v in the namespace", from, DefaultServerLabels)
	}
}

// A workspace's apps' ports (provider.Spec.Ports) are admitted by its
// NetworkPolicy besides its PORT, from the same peers only: the server
// reaches a second app at the Pod's IP on its own port.
func TestNetworkPolicyAdmitsAppPorts(t *testing.T) {
	c := newTestCluster(t)
	p := c.provider(c.config())
	ctx := t.Context()
	if err := p.Provision(ctx, "pol-apps"); err != nil {
		t.Fatal(err)
	}
	if err := p.Start(ctx, provider.Spec{ID: "pol-apps", Owner: "alice", Ports: []int{8081, 9000}}); err != nil {
		t.Fatal(err)
	}
	np, err := c.cli.NetworkingV1().NetworkPolicies(c.ns).Get(ctx, PolicyName("pol-apps"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(np.Spec.Ingress) != 1 {
		t.Fatalf("ingress rules %+v; want one", np.Spec.Ingress)
	}
	var ports []int
	for _, pp := range np.Spec.Ingress[0].Ports {
		if pp.Port == nil || pp.Protocol == nil || *pp.Protocol != corev1.ProtocolTCP {
			t.Fatalf("ingress port %+v; want TCP with a number", pp)
		}
		ports = append(ports, pp.Port.IntValue())
	}
	if len(ports) != 3 || ports[0] != ContainerPort || ports[1] != 8081 || ports[2] != 9000 {
		t.Errorf("ingress ports %v; want %d, 8081 and 9000", ports, ContainerPort)
	}
}
