package kubernetes

import (
	"context"
	"fmt"
	"maps"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// DefaultServerLabels select the server's Pods (in the workspaces'
// namespace) when Config.ServerPeers is zero.
var DefaultServerLabels = map[string]string{"app.kubernetes.io/name": "gantry"}

// ServerPeers say where the server's proxy reaches workspaces from: the
// only ingress a workspace's NetworkPolicy admits.
type ServerPeers struct {
	// PodLabels select the server's Pods; with NamespaceLabels, in the
	// namespaces those select, else in the workspaces' namespace.
	PodLabels       map[string]string
	NamespaceLabels map[string]string
	// CIDRs admit these address blocks (a server outside the cluster: the
	// address its connections to the Pods come from).
	CIDRs []string
}

func (s ServerPeers) zero() bool {
	return len(s.PodLabels) == 0 && len(s.NamespaceLabels) == 0 && len(s.CIDRs) == 0
}

func (s ServerPeers) validate() error {
	for _, c := range s.CIDRs {
		if _, err := netip.ParsePrefix(c); err != nil {
			return fmt.Errorf("kubernetes: Config.ServerPeers: CIDR %q: %w", c, err)
		}
	}
	return nil
}

// peers are the NetworkPolicy's ingress sources.
func (s ServerPeers) peers() []networkingv1.NetworkPolicyPeer {
	var out []networkingv1.NetworkPolicyPeer
	if len(s.PodLabels) > 0 || len(s.NamespaceLabels) > 0 {
		var peer networkingv1.NetworkPolicyPeer
		if len(s.PodLabels) > 0 {
			peer.PodSelector = &metav1.LabelSelector{MatchLabels: maps.Clone(s.PodLabels)}
		}
		if len(s.NamespaceLabels) > 0 {
			peer.NamespaceSelector = &metav1.LabelSelector{MatchLabels: maps.Clone(s.NamespaceLabels)}
		}
		out = append(out, peer)
	}
	for _, c := range s.CIDRs {
		out = append(out, networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: c}})
	}
	return out
}

// PolicyName is the name of workspace id's NetworkPolicy.
func PolicyName(id string) string { return "ws-" + id }

// policySpec is workspace id's NetworkPolicy: its Pod takes ingress only
// from the server's peers, only on its PORT and its apps' ports; a policy
// of type Ingress denies every other ingress to the Pods it selects.
func (p *Provider) policySpec(id string, appPorts []int) *networkingv1.NetworkPolicy {
	tcp := corev1.ProtocolTCP
	ports := []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: new(intstr.FromInt32(ContainerPort))}}
	for _, n := range appPorts {
		if n > 0 && n <= 65535 && n != ContainerPort {
			ports = append(ports, networkingv1.NetworkPolicyPort{Protocol: &tcp, Port: new(intstr.FromInt(n))})
		}
	}
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: PolicyName(id), Namespace: p.cfg.Namespace, Labels: p.labels(id, RoleWorkspace)},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{LabelWorkspaceID: id, LabelRole: RoleWorkspace}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				Ports: ports,
				From:  p.cfg.ServerPeers.peers(),
			}},
		},
	}
}

// ensurePolicy creates workspace id's NetworkPolicy, or brings an existing
// one to the current spec (the configured peers may have changed). Start
// calls it before it creates the Pod, so the Pod is never unprotected.
func (p *Provider) ensurePolicy(ctx context.Context, id string, appPorts []int) error {
	pols := p.cli.NetworkingV1().NetworkPolicies(p.cfg.Namespace)
	want := p.policySpec(id, appPorts)
	_, err := pols.Create(ctx, want, metav1.CreateOptions{})
	if err == nil || !apierrors.IsAlreadyExists(err) {
		return wrap("create network policy of", id, err)
	}
	cur, err := pols.Get(ctx, want.Name, metav1.GetOptions{})
	if err != nil {
		return wrap("get network policy of", id, err)
	}
	if cur.Labels[LabelWorkspaceID] != id {
		return fmt.Errorf("kubernetes: network policy %s/%s exists but is not labelled %s=%s; refusing to touch it", p.cfg.Namespace, want.Name, LabelWorkspaceID, id)
	}
	cur.Spec = want.Spec
	_, err = pols.Update(ctx, cur, metav1.UpdateOptions{})
	return wrap("update network policy of", id, err)
}

// deletePolicy deletes workspace id's NetworkPolicy; a missing one is not
// an error.
func (p *Provider) deletePolicy(ctx context.Context, id string) error {
	err := p.cli.NetworkingV1().NetworkPolicies(p.cfg.Namespace).Delete(ctx, PolicyName(id), metav1.DeleteOptions{})
	if err == nil || apierrors.IsNotFound(err) {
		return nil
	}
	return wrap("delete network policy of", id, err)
}
