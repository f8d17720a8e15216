# strata agents: a fixed-size autoscaling group of NVMe instances behind the bootstrap
# target group. Each agent keeps its log on the instance store, its metastore in
# FoundationDB and its closed segments in S3.
#
# Identity comes from the instance, not from Terraform: node_id is derived from the
# primary private IPv4 (unique in the VPC and stable for the instance's life), the
# advertised address is that IP, and the rack is the availability zone. A replacement
# instance joins as a new node; its instance store starts empty anyway: the cluster
# replaces a dead agent's replicas by itself (replica_replacement_delay_ms), and an
# instance that comes back from a stop/start with a blank instance store under its old
# node id rebuilds its replicas (docs/cluster.md, "Agents are cattle").
#
# Scale-in and instance refreshes drain first: a lifecycle hook holds a terminating
# instance while strata-drain-watch, on the instance, drains the agent (its leaderships
# and then its replicas move to the other agents), stops it, and completes the hook.

data "aws_partition" "current" {}

data "aws_region" "current" {}

data "aws_ami" "selected" {
  most_recent = true
  owners      = var.ami_id == null ? ["136693071363"] : null # Debian's official AWS account

  filter {
    name   = var.ami_id == null ? "name" : "image-id"
    values = [var.ami_id == null ? "debian-12-amd64-*" : var.ami_id]
  }

  filter {
    name   = "architecture"
    values = ["x86_64"]
  }
}

locals {
  archive_url     = "s3://${var.archive_bucket_name}/${var.archive_prefix}"
  region          = data.aws_region.current.name
  drain_hook_name = "strata-drain"

  user_data = templatefile("${path.module}/user-data.sh.tftpl", {
    region                 = local.region
    archive_url            = local.archive_url
    cluster_file_parameter = var.fdb_cluster_file_parameter_name
    fdb_prefix             = var.fdb_prefix
    fdb_version            = var.fdb_version
    fdb_package_base_url   = var.fdb_package_base_url
    fdb_clients_sha256     = var.fdb_clients_deb_sha256
    strata_binary_s3_uri   = var.strata_binary_s3_uri == null ? "" : var.strata_binary_s3_uri
    strata_binary_sha256   = var.strata_binary_sha256 == null ? "" : var.strata_binary_sha256
    kafka_port             = var.kafka_port
    http_port              = var.http_port
    stop_timeout_seconds   = var.stop_timeout_seconds
    drain_timeout_seconds  = var.drain_timeout_seconds
    drain_hook_name        = local.drain_hook_name
    log_filter             = var.log_filter
    extra_settings_toml    = var.extra_settings_toml
  })
}

resource "aws_launch_template" "agents" {
  name_prefix            = "${var.name}-agent-"
  description            = "strata agent"
  image_id               = data.aws_ami.selected.id
  instance_type          = var.instance_type
  ebs_optimized          = true
  update_default_version = true
  user_data              = base64encode(local.user_data)

  iam_instance_profile {
    arn = aws_iam_instance_profile.agents.arn
  }

  network_interfaces {
    device_index                = 0
    associate_public_ip_address = false
    security_groups             = var.security_group_ids
    delete_on_termination       = true
  }

  metadata_options {
    http_endpoint               = "enabled"
    http_tokens                 = "required"
    http_put_response_hop_limit = 1
    instance_metadata_tags      = "disabled"
  }

  monitoring {
    enabled = true
  }

  # Only the root volume is EBS; the NVMe instance store of i4i/i7ie is attached
  # automatically and formatted at boot by strata-prepare.
  block_device_mappings {
    device_name = data.aws_ami.selected.root_device_name

    ebs {
      volume_type           = "gp3"
      volume_size           = var.root_volume_size_gb
      encrypted             = true
      kms_key_id            = var.ebs_kms_key_arn
      delete_on_termination = true
    }
  }

  tag_specifications {
    resource_type = "instance"
    tags          = merge(var.tags, { Name = "${var.name}-agent" })
  }

  tag_specifications {
    resource_type = "volume"
    tags          = merge(var.tags, { Name = "${var.name}-agent" })
  }

  tags = var.tags

  lifecycle {
    precondition {
      condition     = (var.strata_binary_s3_uri == null) == (var.strata_binary_sha256 == null)
      error_message = "Set strata_binary_s3_uri and strata_binary_sha256 together (or neither, when the AMI contains /usr/local/bin/strata)."
    }
  }
}

resource "aws_autoscaling_group" "agents" {
  name_prefix               = "${var.name}-agents-"
  min_size                  = var.agent_count
  max_size                  = var.agent_count
  desired_capacity          = var.agent_count
  vpc_zone_identifier       = var.subnet_ids
  target_group_arns         = var.target_group_arns
  health_check_type         = "ELB"
  health_check_grace_period = var.health_check_grace_period_seconds
  # Agents are replaced one at a time and never rolled automatically: a new launch
  # template version applies to instances launched from then on. Each replacement
  # drops that agent's instance store, so roll deliberately (e.g. an instance refresh
  # after the archive has caught up).
  termination_policies = ["OldestLaunchTemplate", "OldestInstance"]
  enabled_metrics = [
    "GroupDesiredCapacity",
    "GroupInServiceInstances",
    "GroupPendingInstances",
    "GroupTerminatingInstances",
    "GroupTotalInstances",
  ]

  launch_template {
    id      = aws_launch_template.agents.id
    version = aws_launch_template.agents.latest_version
  }

  tag {
    key                 = "Name"
    value               = "${var.name}-agent"
    propagate_at_launch = true
  }

  dynamic "tag" {
    for_each = var.tags

    content {
      key                 = tag.key
      value               = tag.value
      propagate_at_launch = true
    }
  }
}

# A terminating instance waits in Terminating:Wait until strata-drain-watch completes
# the hook (the agent drained and stopped), or the timeout passes.
resource "aws_autoscaling_lifecycle_hook" "drain" {
  name                   = local.drain_hook_name
  autoscaling_group_name = aws_autoscaling_group.agents.name
  lifecycle_transition   = "autoscaling:EC2_INSTANCE_TERMINATING"
  heartbeat_timeout      = var.drain_timeout_seconds
  default_result         = "CONTINUE"
}
