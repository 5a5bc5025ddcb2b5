package localcluster

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// nodeNetwork is the network of one real node. The node — containerd, kubelet, kube-proxy and its
// pods' bridge — lives in a network namespace of its own, joined to the host by a veth pair, so its
// bridge, its iptables chains (kube-proxy's KUBE-*, the bridge plugin's CNI-*) and its
// net.ipv4.ip_forward never touch the host's or another cluster's: two real-node clusters at once
// do not collide, and deleting the namespace takes all of it away. The host end of the veth
// carries the address kube-apiserver binds and advertises, which pods reach through the
// `kubernetes` Service; a host route sends the pod CIDR into the namespace, so kube-apiserver
// reaches webhooks at pod IPs and the kubelet at the node IP.
type nodeNetwork struct {
	Index int `json:"index"` // 1..250, claimed by creating the namespace
	// Netns is the network namespace's name under /var/run/netns.
	Netns string `json:"netns"`
}

const netnsPrefix = "daemonguard-node-"

// HostIP is the host's end of the veth: kube-apiserver binds and advertises it.
func (n nodeNetwork) HostIP() string { return fmt.Sprintf("10.201.%d.1", n.Index) }

// NodeIP is the node's end of the veth: the kubelet's --node-ip.
func (n nodeNetwork) NodeIP() string { return fmt.Sprintf("10.201.%d.2", n.Index) }

// PodCIDR is the range the CNI bridge hands pod IPs from.
func (n nodeNetwork) PodCIDR() string { return fmt.Sprintf("10.202.%d.0/24", n.Index) }

// ServiceCIDR is the cluster's Service range; its first address is the `kubernetes` Service.
func (n nodeNetwork) ServiceCIDR() string { return fmt.Sprintf("10.203.%d.0/24", n.Index) }

// KubernetesServiceIP is the ClusterIP of the `kubernetes` Service.
func (n nodeNetwork) KubernetesServiceIP() string { return fmt.Sprintf("10.203.%d.1", n.Index) }

// Bridge is the name of the pods' bridge inside the namespace.
func (n nodeNetwork) Bridge() string { return fmt.Sprintf("dgpods%d", n.Index) }

func (n nodeNetwork) hostVeth() string { return fmt.Sprintf("dgnode%d", n.Index) }
func (n nodeNetwork) nodeVeth() string { return "eth0" }

// NetnsPath is where the namespace is mounted, for nsenter.
func (n nodeNetwork) NetnsPath() string { return filepath.Join("/var/run/netns", n.Netns) }

// claimNodeNetwork creates the namespace of a free index: `ip netns add` fails when the name
// exists, which makes it the lock between clusters starting at once.
func claimNodeNetwork() (nodeNetwork, error) {
	for _, i := range rand.Perm(250) {
		n := nodeNetwork{Index: i + 1, Netns: fmt.Sprintf("%s%d", netnsPrefix, i+1)}
		if _, err := os.Stat(n.NetnsPath()); err == nil {
			continue
		}
		if _, err := runCmd("ip", "netns", "add", n.Netns); err != nil {
			continue
		}
		if err := n.setUp(); err != nil {
			n.tearDown()
			return nodeNetwork{}, err
		}
		return n, nil
	}
	return nodeNetwork{}, errors.New("no free real-node network: 250 namespaces named " + netnsPrefix + "N exist (make demo-down removes stale ones)")
}

func (n nodeNetwork) setUp() error {
	inNode := func(args ...string) []string { return append([]string{"-n", n.Netns}, args...) }
	steps := [][]string{
		{"link", "add", n.hostVeth(), "type", "veth", "peer", "name", n.nodeVeth(), "netns", n.Netns},
		{"addr", "add", n.HostIP() + "/30", "dev", n.hostVeth()},
		{"link", "set", n.hostVeth(), "up"},
		inNode("link", "set", "lo", "up"),
		inNode("addr", "add", n.NodeIP()+"/30", "dev", n.nodeVeth()),
		inNode("link", "set", n.nodeVeth(), "up"),
		inNode("route", "add", "default", "via", n.HostIP()),
		{"route", "add", n.PodCIDR(), "via", n.NodeIP()},
	}
	for _, args := range steps {
		if out, err := runCmd("ip", args...); err != nil {
			return fmt.Errorf("set up the real node's network (ip %s): %w: %s", strings.Join(args, " "), err, out)
		}
	}
	// Forwarding between the pods' bridge and the veth, inside the node's namespace only: the
	// host's net.ipv4.ip_forward stays as it is.
	if out, err := runCmd("ip", "netns", "exec", n.Netns, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1"); err != nil {
		return fmt.Errorf("enable forwarding in %s: %w: %s", n.Netns, err, out)
	}
	return nil
}

// tearDown deletes the namespace, and with it the veth pair, the host route, the bridge and every
// iptables chain and sysctl of the node, once no process is left in it.
func (n nodeNetwork) tearDown() {
	_, _ = runCmd("ip", "link", "del", n.hostVeth())
	_, _ = runCmd("ip", "netns", "del", n.Netns)
}

func runCmd(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}
