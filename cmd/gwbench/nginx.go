package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/edgegw/gateway/bench/child"
)

var errNoNginx = errors.New("nginx is not installed")

// nginxConfig is nginx as a plain reverse proxy in front of the simulator:
// keep-alive upstream connections and no buffering, so SSE passes through.
const nginxConfig = `daemon off;
worker_processes 1;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
events { worker_connections 16384; }
http {
  access_log off;
  client_body_temp_path %[1]s/body;
  proxy_temp_path %[1]s/proxy;
  fastcgi_temp_path %[1]s/fastcgi;
  uwsgi_temp_path %[1]s/uwsgi;
  scgi_temp_path %[1]s/scgi;
  upstream simulator { server %[2]s; keepalive 256; }
  server {
    listen %[3]s;
    location / {
      proxy_pass http://simulator;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_read_timeout 300s;
    }
  }
}
`

// startNginx runs nginx (when installed) on a free loopback port in front
// of upstream.
func startNginx(ctx context.Context, out, upstream string) (*child.Process, error) {
	bin, err := exec.LookPath("nginx")
	if err != nil {
		if _, statErr := os.Stat("/usr/sbin/nginx"); statErr != nil {
			return nil, errNoNginx
		}
		bin = "/usr/sbin/nginx"
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	dir, err := filepath.Abs(filepath.Join(out, "nginx"))
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	conf := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf(nginxConfig, dir, upstream, addr)), 0o644); err != nil {
		return nil, err
	}
	c, err := child.Start(ctx, "nginx", bin, nil, nil, "-c", conf, "-p", dir)
	if err != nil {
		return nil, err
	}
	c.Addr = addr
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if conn, err := net.Dial("tcp", addr); err == nil {
			_ = conn.Close()
			return c, nil
		}
	}
	c.Stop()
	return nil, fmt.Errorf("nginx did not listen on %s (see %s/error.log)", addr, dir)
}
