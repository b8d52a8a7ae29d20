# slotlease on Nomad: a lease manager on every client node (a system job),
# joined to a NATS cluster of three servers run outside this job (the
# systemd units or the container of docs/deploy.md, on three hosts, with
# the configurations `leasemgr layout --hosts` wrote for them).
#
# The layout's environment for lease managers (leasemgr.env) is a Nomad
# Variable of this job, and its two seeds are files on every client, in
# the host volume "slotlease-creds" (docs/deploy.md, "Nomad"):
#
#   leasemgr layout --out layout --hosts nats-0.example,nats-1.example,nats-2.example \
#     --creds-dir /etc/slotlease/creds
#   nomad var put nomad/jobs/slotlease leasemgr_env="$(cat layout/leasemgr.env)"
#
# and on each client, /etc/slotlease/creds holding manager.nk and
# jobs-admin.nk (root's, mode 0440, group 65532: the image's user), with
#
#   client { host_volume "slotlease-creds" { path = "/etc/slotlease/creds" read_only = true } }
#
# in the client's configuration.
job "slotlease" {
  type = "system"

  group "leasemgr" {
    volume "creds" {
      type      = "host"
      source    = "slotlease-creds"
      read_only = true
    }

    network {
      port "http" {
        to = 8080
      }
    }

    service {
      name     = "leasemgr"
      provider = "nomad"
      port     = "http"

      # Ready: this process serves the node and NATS is up.
      check {
        name     = "ready"
        type     = "http"
        path     = "/readyz"
        interval = "10s"
        timeout  = "2s"
      }
    }

    task "leasemgr" {
      driver = "docker"
      # leasemgr hands its node over on SIGTERM (docs/guarantees.md, 2.4).
      kill_signal  = "SIGTERM"
      kill_timeout = "30s"

      config {
        image = "slotlease:VERSION"
        args  = ["run"]
        ports = ["http"]
      }

      # The image's user; the seeds' group on the clients.
      user = "65532:65532"

      volume_mount {
        volume      = "creds"
        destination = "/etc/slotlease/creds"
        read_only   = true
      }

      # leasemgr.env, as `leasemgr layout` wrote it: NATS_URL, NATS_NKEY and
      # JOBS_NATS_NKEY (under /etc/slotlease/creds), DISCONNECT_EVENTS,
      # NATS_REPLICAS, NATS_EXECUTORS_MAX_STORE.
      template {
        data        = <<-EOT
          {{ with nomadVar "nomad/jobs/slotlease" }}{{ .leasemgr_env }}{{ end }}
        EOT
        destination = "local/leasemgr.env"
        env         = true
        change_mode = "restart"
      }

      env {
        NODE_ID         = "${node.unique.name}"
        POOL_CAPACITIES = "default=4"
        # On the allocation's address, for the service check.
        HTTP_ADDR  = "0.0.0.0:8080"
        LOG_FORMAT = "json"
      }

      resources {
        cpu    = 100
        memory = 128
        # Room for a burst of grants and the job broker.
        memory_max = 512
      }
    }
  }
}
