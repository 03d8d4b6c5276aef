package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// opsPortName names the bus container's operations port.
const opsPortName = "ops"

// ConfigProber asks a bus pod which configuration it has loaded.
type ConfigProber interface {
	// LoadedConfigHash returns the hash of the configuration pod serves for
	// the workspace (config.DocumentHash of the file it loaded).
	LoadedConfigHash(ctx context.Context, pod *corev1.Pod, workspace string) (string, error)
}

// HTTPConfigProber reads a bus pod's /configz on its operations port (the
// container port named "ops"), at the pod's IP.
type HTTPConfigProber struct {
	// Client makes the requests; nil means one with a 3 s timeout.
	Client *http.Client
}

var _ ConfigProber = (*HTTPConfigProber)(nil)

// LoadedConfigHash implements ConfigProber.
func (p *HTTPConfigProber) LoadedConfigHash(ctx context.Context, pod *corev1.Pod, workspace string) (string, error) {
	port := containerPort(pod, opsPortName)
	if port == 0 {
		return "", fmt.Errorf("no container port %q", opsPortName)
	}
	if pod.Status.PodIP == "" {
		return "", fmt.Errorf("no pod IP")
	}
	c := p.Client
	if c == nil {
		c = &http.Client{Timeout: 3 * time.Second}
	}
	url := "http://" + net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(int(port))) + "/configz"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	res, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET /configz: %s", res.Status)
	}
	var body struct {
		Workspaces []struct {
			Workspace  string `json:"workspace"`
			ConfigHash string `json:"configHash"`
		} `json:"workspaces"`
	}
	if err := json.NewDecoder(io.LimitReader(res.Body, 1<<20)).Decode(&body); err != nil {
		return "", fmt.Errorf("GET /configz: %w", err)
	}
	for _, w := range body.Workspaces {
		if w.Workspace == workspace {
			return w.ConfigHash, nil
		}
	}
	return "", fmt.Errorf("serves no workspace %q", workspace)
}

// containerPort returns the port named name of pod's first container that
// has one, 0 when none does.
func containerPort(pod *corev1.Pod, name string) int32 {
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			if p.Name == name {
				return p.ContainerPort
			}
		}
	}
	return 0
}

// podReady reports whether pod is running, ready and not going.
func podReady(pod *corev1.Pod) bool {
	if !pod.DeletionTimestamp.IsZero() {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// podLoad is what a bus pod said about the configuration it serves.
type podLoad struct {
	pod  string
	hash string
	err  error
}

// loadedHash returns the hash every pod of loads reports, "" when they
// differ, one could not be asked, or there is none.
func loadedHash(loads []podLoad) string {
	if len(loads) == 0 {
		return ""
	}
	h := loads[0].hash
	for _, l := range loads {
		if l.err != nil || l.hash != h {
			return ""
		}
	}
	return h
}

// notLoaded describes the pods of loads that do not serve want.
func notLoaded(loads []podLoad, want string) string {
	var out []string
	for _, l := range loads {
		switch {
		case l.err != nil:
			out = append(out, fmt.Sprintf("pod %s: cannot read its configuration: %v", l.pod, l.err))
		case l.hash != want:
			h := l.hash
			if h == "" {
				h = "a configuration of no file"
			}
			out = append(out, fmt.Sprintf("pod %s serves %s", l.pod, h))
		}
	}
	return strings.Join(out, "; ")
}

// podProblems says why bus pods are not ready, as kubelet and the
// scheduler report it: unschedulable, image pulls failing, crash loops
// (with the last termination message), volume claims pending. Pods are
// reported in name order; a pod with no known problem is left out.
func podProblems(pods []corev1.Pod, pvcs []corev1.PersistentVolumeClaim) []string {
	var out []string
	sorted := slices.Clone(pods)
	slices.SortFunc(sorted, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	for i := range sorted {
		p := &sorted[i]
		if podReady(p) || !p.DeletionTimestamp.IsZero() {
			continue
		}
		if why := podProblem(p); why != "" {
			out = append(out, "pod "+p.Name+": "+why)
		}
	}
	for _, c := range pvcs {
		if c.Status.Phase == corev1.ClaimPending {
			out = append(out, "volume claim "+c.Name+" is pending (no volume bound: check its StorageClass)")
		}
	}
	return out
}

// podProblem says why one pod is not ready, "" when nothing explains it.
func podProblem(p *corev1.Pod) string {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
			return strings.TrimSpace("unschedulable: " + c.Message)
		}
	}
	statuses := append(slices.Clone(p.Status.InitContainerStatuses), p.Status.ContainerStatuses...)
	for _, cs := range statuses {
		w := cs.State.Waiting
		if w == nil {
			continue
		}
		switch w.Reason {
		case "ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull":
			return fmt.Sprintf("container %s cannot pull its image (%s): %s", cs.Name, w.Reason, w.Message)
		case "CrashLoopBackOff":
			msg := fmt.Sprintf("container %s is crash-looping (%d restarts)", cs.Name, cs.RestartCount)
			if t := cs.LastTerminationState.Terminated; t != nil {
				msg += fmt.Sprintf(", last exit code %d", t.ExitCode)
				if m := strings.TrimSpace(t.Message); m != "" {
					msg += ": " + m
				} else if t.Reason != "" {
					msg += " (" + t.Reason + ")"
				}
			}
			return msg
		case "CreateContainerConfigError", "CreateContainerError", "RunContainerError":
			return fmt.Sprintf("container %s cannot start (%s): %s", cs.Name, w.Reason, w.Message)
		}
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Running != nil && !cs.Ready {
			return fmt.Sprintf("container %s is running but not ready (its readiness probe fails)", cs.Name)
		}
	}
	if p.Status.Phase == corev1.PodPending {
		return "pending"
	}
	return ""
}
