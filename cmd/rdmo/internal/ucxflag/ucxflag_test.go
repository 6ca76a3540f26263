package ucxflag

import (
	"strings"
	"testing"
)

func TestDeviceConfig(t *testing.T) {
	if cfg, err := DeviceConfig(""); err != nil || cfg != nil {
		t.Errorf("empty: %v %v", cfg, err)
	}
	cfg, err := DeviceConfig("lo")
	if err != nil {
		t.Fatal(err)
	}
	if cfg["NET_DEVICES"] != "lo" {
		t.Errorf("lo: %v", cfg)
	}
	if cfg, err := DeviceConfig("memory"); err != nil || cfg["TLS"] != "shm,self" {
		t.Errorf("memory: %v %v", cfg, err)
	}
	_, err = DeviceConfig("mlx9_9")
	if err == nil || !strings.Contains(err.Error(), `no device "mlx9_9"; devices UCX reports: `) || !strings.Contains(err.Error(), "lo") {
		t.Errorf("unknown device: %v", err)
	}
	if got := ConfigEnv(map[string]string{"TLS": "shm,self", "NET_DEVICES": "lo"}); strings.Join(got, " ") != "UCX_NET_DEVICES=lo UCX_TLS=shm,self" {
		t.Errorf("env %v", got)
	}
}

func TestSDKLogLevel(t *testing.T) {
	for _, l := range []string{"fatal", "error", "warn", "info", "debug", "trace"} {
		if err := ApplySDKLogLevel(l); err != nil {
			t.Errorf("%s: %v", l, err)
		}
	}
	if err := ApplySDKLogLevel("loud"); err == nil {
		t.Error("unknown level accepted")
	}
	ApplySDKLogLevel("warn")
	if v := UCXVersion(); !strings.Contains(v, ".") {
		t.Errorf("version %q", v)
	}
}
