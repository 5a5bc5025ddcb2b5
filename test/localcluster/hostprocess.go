package localcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
)

// HostProcess is a program of the system under test (the daemonguard binary, say) running on the
// host against the cluster, the way the chart's URL mode runs it. It dies with its owner like the
// control-plane components do.
type HostProcess struct {
	p *process
}

// StartHostProcess starts bin with args; its output goes to Dir/logs/<name>.log.
func (c *Cluster) StartHostProcess(name, bin string, args ...string) (*HostProcess, error) {
	return c.StartHostProcessEnv(name, bin, nil, args...)
}

// StartHostProcessEnv is StartHostProcess with env (NAME=value) added to this process's
// environment, as a container's env is to its image's.
func (c *Cluster) StartHostProcessEnv(name, bin string, env []string, args ...string) (*HostProcess, error) {
	p, err := startProcessEnv(name, bin, args, append(os.Environ(), env...), filepath.Join(c.Dir, "logs"))
	if err != nil {
		return nil, err
	}
	return &HostProcess{p: p}, nil
}

// Stop sends SIGTERM, waits up to 10 s for a clean exit, then kills.
func (h *HostProcess) Stop() { h.p.stop(10 * time.Second) }

// Exited returns an error with the end of the log if the process has exited, nil while it runs.
func (h *HostProcess) Exited() error { return h.p.exitedErr() }

// LostPortRace tells that the process exited because an address it was given to listen on was
// taken between the test choosing the port and the process binding it, so starting it again
// on other ports may succeed.
func (h *HostProcess) LostPortRace() bool {
	var e *exitError
	return errors.As(h.p.exitedErr(), &e) && e.portTaken()
}

// PID is the process's ID, to read its memory and CPU time from /proc.
func (h *HostProcess) PID() int { return h.p.cmd.Process.Pid }

// LogPath is where the process's output goes.
func (h *HostProcess) LogPath() string { return h.p.logPath }

// ServiceAccountKubeconfig writes a kubeconfig that authenticates as the ServiceAccount
// namespace/name with a fresh token, so a component on the host runs with exactly the RBAC its
// chart grants instead of the admin identity.
func (c *Cluster) ServiceAccountKubeconfig(ctx context.Context, namespace, name string) (string, error) {
	tr, err := c.Client.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(24 * 3600))},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("create token for serviceaccount %s/%s: %w", namespace, name, err)
	}
	const ctxName = "daemonguard-local"
	kc := clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{ctxName: {Server: c.RESTConfig.Host, CertificateAuthorityData: c.pki.CACertPEM}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{ctxName: {Token: tr.Status.Token}},
		Contexts:       map[string]*clientcmdapi.Context{ctxName: {Cluster: ctxName, AuthInfo: ctxName, Namespace: namespace}},
		CurrentContext: ctxName,
	}
	path := filepath.Join(c.Dir, fmt.Sprintf("kubeconfig-%s-%s", namespace, name))
	if err := clientcmd.WriteToFile(kc, path); err != nil {
		return "", fmt.Errorf("write kubeconfig: %w", err)
	}
	return path, os.Chmod(path, 0o600)
}
