package app_test

import (
	"encoding/json"
	"net"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/kairos-dev/kairos/config"
)

// TestDockerMonitoring checks, without Docker, that docker-compose.yml
// wires Prometheus and Grafana together: Prometheus scrapes the admin
// listener of docker/kairos.toml, Grafana's provisioned datasource is
// that Prometheus under the uid the dashboard uses, and the dashboard
// provider reads the directory the dashboard is mounted at.
func TestDockerMonitoring(t *testing.T) {
	const dir = "../../docker"
	var compose struct {
		Services map[string]struct {
			Image       string            `yaml:"image"`
			Volumes     []string          `yaml:"volumes"`
			Ports       []string          `yaml:"ports"`
			Environment map[string]string `yaml:"environment"`
		} `yaml:"services"`
	}
	readYAML(t, filepath.Join(dir, "docker-compose.yml"), &compose)
	for _, s := range []string{"redis", "kairos", "prometheus", "grafana"} {
		if _, ok := compose.Services[s]; !ok {
			t.Fatalf("docker-compose.yml: no service %s", s)
		}
	}
	// mounts returns a service's bind mounts, container path → host path
	// (relative to docker/), and checks that each host path exists.
	mounts := func(service string) map[string]string {
		out := map[string]string{}
		for _, v := range compose.Services[service].Volumes {
			parts := strings.Split(v, ":")
			if len(parts) < 2 || !strings.HasPrefix(parts[0], ".") {
				continue // a named volume
			}
			if _, err := os.Stat(filepath.Join(dir, parts[0])); err != nil {
				t.Errorf("%s mounts %s: %v", service, parts[0], err)
			}
			out[parts[1]] = filepath.Join(dir, parts[0])
		}
		return out
	}

	// Prometheus scrapes /metrics on the admin port of the image's config.
	cfg, err := config.Load(filepath.Join(dir, "kairos.toml"))
	if err != nil {
		t.Fatal(err)
	}
	promFile := mounts("prometheus")["/etc/prometheus/prometheus.yml"]
	if promFile == "" {
		t.Fatal("prometheus: prometheus.yml not mounted at /etc/prometheus/prometheus.yml")
	}
	var prom struct {
		ScrapeConfigs []struct {
			JobName       string `yaml:"job_name"`
			MetricsPath   string `yaml:"metrics_path"`
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	readYAML(t, promFile, &prom)
	scraped := false
	for _, sc := range prom.ScrapeConfigs {
		if sc.JobName != "kairos" {
			continue
		}
		if sc.MetricsPath != "/metrics" {
			t.Errorf("prometheus.yml: job kairos scrapes %q", sc.MetricsPath)
		}
		for _, st := range sc.StaticConfigs {
			for _, target := range st.Targets {
				host, port, err := net.SplitHostPort(target)
				if err != nil || host != "kairos" || port != strconv.Itoa(cfg.AdminPort) {
					t.Errorf("prometheus.yml: target %q, want kairos:%d (the admin listener)", target, cfg.AdminPort)
				}
				scraped = true
			}
		}
	}
	if !scraped {
		t.Error("prometheus.yml: no scrape job named kairos (the dashboard's process panels use job=\"kairos\")")
	}

	// Grafana: provisioning and dashboards mounted where Grafana reads them.
	gm := mounts("grafana")
	prov := gm["/etc/grafana/provisioning"]
	if prov == "" {
		t.Fatal("grafana: provisioning not mounted at /etc/grafana/provisioning")
	}
	var ds struct {
		APIVersion  int `yaml:"apiVersion"`
		Datasources []struct {
			Type, UID, URL string
		} `yaml:"datasources"`
	}
	readYAML(t, filepath.Join(prov, "datasources", "prometheus.yml"), &ds)
	if ds.APIVersion != 1 || len(ds.Datasources) != 1 || ds.Datasources[0].Type != "prometheus" {
		t.Fatalf("datasources/prometheus.yml: %+v", ds)
	}
	if u, err := url.Parse(ds.Datasources[0].URL); err != nil || u.Host != "prometheus:9090" {
		t.Errorf("datasource URL %q, want http://prometheus:9090 (the compose service)", ds.Datasources[0].URL)
	}
	var dp struct {
		APIVersion int `yaml:"apiVersion"`
		Providers  []struct {
			Type    string `yaml:"type"`
			Options struct {
				Path string `yaml:"path"`
			} `yaml:"options"`
		} `yaml:"providers"`
	}
	readYAML(t, filepath.Join(prov, "dashboards", "kairos.yml"), &dp)
	if dp.APIVersion != 1 || len(dp.Providers) != 1 || dp.Providers[0].Type != "file" {
		t.Fatalf("dashboards/kairos.yml: %+v", dp)
	}
	dashDir := gm[dp.Providers[0].Options.Path]
	if dashDir == "" {
		t.Fatalf("grafana: nothing mounted at the provider's path %q", dp.Providers[0].Options.Path)
	}
	home := compose.Services["grafana"].Environment["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
	if rel, ok := strings.CutPrefix(home, dp.Providers[0].Options.Path+"/"); !ok {
		t.Errorf("grafana home dashboard %q is not under %s", home, dp.Providers[0].Options.Path)
	} else if _, err := os.Stat(filepath.Join(dashDir, rel)); err != nil {
		t.Errorf("grafana home dashboard: %v", err)
	}

	// Every datasource of the dashboard is the provisioned one.
	b, err := os.ReadFile(filepath.Join(dashDir, "kairos.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash any
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatal(err)
	}
	n := 0
	var walk func(p string, v any)
	walk = func(p string, v any) {
		switch v := v.(type) {
		case map[string]any:
			if d, ok := v["datasource"].(map[string]any); ok {
				n++
				if d["uid"] != ds.Datasources[0].UID || d["type"] != "prometheus" {
					t.Errorf("kairos.json %s: datasource %v, want uid %q", p, d, ds.Datasources[0].UID)
				}
			}
			for k, c := range v {
				walk(path.Join(p, k), c)
			}
		case []any:
			for i, c := range v {
				walk(path.Join(p, strconv.Itoa(i)), c)
			}
		}
	}
	walk("/", dash)
	if n == 0 {
		t.Error("kairos.json names no datasource")
	}
}

func readYAML(t *testing.T, file string, v any) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}
