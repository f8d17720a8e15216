# A FoundationDB 7.3 cluster on EC2 for strata's metastore.
#
# Every host has a fixed private IP (an ENI created from its subnet's CIDR) and a data
# volume, both independent of the instance: the cluster file, which names the
# coordinators by IP, is therefore known at plan time and stays valid when an instance
# is replaced. The cluster file is published in SSM Parameter Store for the agents.

data "aws_partition" "current" {}

data "aws_subnet" "selected" {
  count = length(var.subnet_ids)
  id    = var.subnet_ids[count.index]
}

data "aws_ami" "debian" {
  count       = var.ami_id == null ? 1 : 0
  most_recent = true
  owners      = ["136693071363"] # Debian's official AWS account

  filter {
    name   = "name"
    values = ["debian-12-amd64-*"]
  }

  filter {
    name   = "architecture"
    values = ["x86_64"]
  }

  filter {
    name   = "virtualization-type"
    values = ["hvm"]
  }
}

locals {
  ami_id       = var.ami_id != null ? var.ami_id : data.aws_ami.debian[0].id
  subnet_count = length(var.subnet_ids)

  hosts = [
    for i in range(var.instance_count) : {
      subnet_id = var.subnet_ids[i % local.subnet_count]
      az        = data.aws_subnet.selected[i % local.subnet_count].availability_zone
      private_ip = (
        var.private_ips != null
        ? var.private_ips[i]
        : cidrhost(data.aws_subnet.selected[i % local.subnet_count].cidr_block, var.private_ip_host_offset + floor(i / local.subnet_count))
      )
    }
  ]

  ports        = [for p in range(var.processes_per_instance) : 4500 + p]
  last_port    = 4500 + var.processes_per_instance - 1
  coordinators = [for h in slice(local.hosts, 0, min(var.coordinator_count, var.instance_count)) : "${h.private_ip}:4500"]

  # description:ID@coordinators; the description allows only [A-Za-z0-9_].
  cluster_file = "${replace(var.name, "-", "_")}:${random_string.cluster_id.result}@${join(",", local.coordinators)}"

  copies     = { single = 1, double = 2, triple = 3 }[var.redundancy_mode]
  zone_count = var.zone_by_availability_zone ? length(distinct([for h in local.hosts : h.az])) : var.instance_count

  parameter_name = var.cluster_file_parameter_name != null ? var.cluster_file_parameter_name : "/${var.name}/fdb/cluster-file"
}

resource "random_string" "cluster_id" {
  length  = 16
  special = false
}

# --- network

resource "aws_security_group" "fdb" {
  name_prefix = "${var.name}-fdb-"
  description = "FoundationDB hosts of ${var.name}"
  vpc_id      = var.vpc_id
  tags        = merge(var.tags, { Name = "${var.name}-fdb" })

  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_vpc_security_group_ingress_rule" "fdb_self" {
  security_group_id            = aws_security_group.fdb.id
  description                  = "FoundationDB processes talking to each other"
  ip_protocol                  = "tcp"
  from_port                    = 4500
  to_port                      = local.last_port
  referenced_security_group_id = aws_security_group.fdb.id
}

resource "aws_vpc_security_group_egress_rule" "fdb_self" {
  security_group_id            = aws_security_group.fdb.id
  description                  = "FoundationDB processes talking to each other"
  ip_protocol                  = "tcp"
  from_port                    = 4500
  to_port                      = local.last_port
  referenced_security_group_id = aws_security_group.fdb.id
}

resource "aws_vpc_security_group_ingress_rule" "fdb_clients" {
  count = length(var.client_security_group_ids)

  security_group_id            = aws_security_group.fdb.id
  description                  = "FoundationDB clients (strata agents, fdbcli)"
  ip_protocol                  = "tcp"
  from_port                    = 4500
  to_port                      = local.last_port
  referenced_security_group_id = var.client_security_group_ids[count.index]
}

# The clients' side of the same connections, so client groups need no rule of their own.
resource "aws_vpc_security_group_egress_rule" "clients_to_fdb" {
  count = length(var.client_security_group_ids)

  security_group_id            = var.client_security_group_ids[count.index]
  description                  = "FoundationDB of ${var.name}"
  ip_protocol                  = "tcp"
  from_port                    = 4500
  to_port                      = local.last_port
  referenced_security_group_id = aws_security_group.fdb.id
}

resource "aws_vpc_security_group_egress_rule" "fdb_packages" {
  for_each = { for pair in setproduct(var.egress_cidr_blocks, [80, 443]) : "${pair[0]}:${pair[1]}" => pair }

  security_group_id = aws_security_group.fdb.id
  description       = "Package downloads (Debian mirrors on 80, FoundationDB releases on 443)"
  ip_protocol       = "tcp"
  from_port         = each.value[1]
  to_port           = each.value[1]
  cidr_ipv4         = each.value[0]
}

# Survives instance replacement, so the coordinator addresses never change.
resource "aws_network_interface" "fdb" {
  count = var.instance_count

  subnet_id       = local.hosts[count.index].subnet_id
  private_ips     = [local.hosts[count.index].private_ip]
  security_groups = [aws_security_group.fdb.id]
  description     = "${var.name} FoundationDB host ${count.index}"
  tags            = merge(var.tags, { Name = "${var.name}-fdb-${count.index}" })
}

# --- storage

# Back up the database with fdbbackup (consistent, cluster-wide); snapshots of single
# volumes under running storage servers are not a consistent backup.
resource "aws_ebs_volume" "data" {
  count = var.instance_count

  availability_zone = local.hosts[count.index].az
  type              = "gp3"
  size              = var.data_volume_size_gb
  iops              = var.data_volume_iops
  throughput        = var.data_volume_throughput_mbps
  encrypted         = true
  kms_key_id        = var.kms_key_arn
  final_snapshot    = true
  tags              = merge(var.tags, { Name = "${var.name}-fdb-${count.index}-data" })
}

# --- IAM: the hosts call no AWS API; the role exists for additional_policy_arns
# (e.g. Session Manager).

data "aws_iam_policy_document" "assume_ec2" {
  statement {
    actions = ["sts:AssumeRole"]

    principals {
      type        = "Service"
      identifiers = ["ec2.${data.aws_partition.current.dns_suffix}"]
    }
  }
}

resource "aws_iam_role" "fdb" {
  name_prefix        = "${substr(var.name, 0, 20)}-fdb-"
  assume_role_policy = data.aws_iam_policy_document.assume_ec2.json
  tags               = var.tags
}

resource "aws_iam_role_policy_attachment" "additional" {
  count = length(var.additional_policy_arns)

  role       = aws_iam_role.fdb.name
  policy_arn = var.additional_policy_arns[count.index]
}

resource "aws_iam_instance_profile" "fdb" {
  name_prefix = "${substr(var.name, 0, 20)}-fdb-"
  role        = aws_iam_role.fdb.name
  tags        = var.tags
}

# --- hosts

resource "aws_instance" "fdb" {
  count = var.instance_count

  ami                  = local.ami_id
  instance_type        = var.instance_type
  iam_instance_profile = aws_iam_instance_profile.fdb.name
  ebs_optimized        = true
  monitoring           = true

  user_data = templatefile("${path.module}/user-data.sh.tftpl", {
    host_index       = count.index
    private_ip       = local.hosts[count.index].private_ip
    zone_id          = var.zone_by_availability_zone ? local.hosts[count.index].az : "${var.name}-${count.index}"
    machine_id       = "${var.name}-${count.index}"
    ports            = local.ports
    cluster_file     = local.cluster_file
    volume_serial    = replace(aws_ebs_volume.data[count.index].id, "-", "")
    fdb_version      = var.fdb_version
    package_base_url = var.fdb_package_base_url
    clients_sha256   = var.fdb_clients_deb_sha256
    server_sha256    = var.fdb_server_deb_sha256
    configure_new    = count.index == 0 ? "${var.redundancy_mode} ${var.storage_engine}" : ""
  })

  network_interface {
    network_interface_id = aws_network_interface.fdb[count.index].id
    device_index         = 0
  }

  metadata_options {
    http_endpoint               = "enabled"
    http_tokens                 = "required"
    http_put_response_hop_limit = 1
  }

  root_block_device {
    volume_type           = "gp3"
    volume_size           = var.root_volume_size_gb
    encrypted             = true
    kms_key_id            = var.kms_key_arn
    delete_on_termination = true
  }

  tags = merge(var.tags, { Name = "${var.name}-fdb-${count.index}" })

  lifecycle {
    # A new AMI or bootstrap script must not restart database hosts on the next apply;
    # roll them deliberately, one at a time (`terraform apply -replace=...`).
    ignore_changes = [ami, user_data]

    precondition {
      condition     = var.coordinator_count <= var.instance_count
      error_message = "The coordinator_count (${var.coordinator_count}) must not exceed instance_count (${var.instance_count})."
    }

    precondition {
      condition     = local.zone_count >= local.copies
      error_message = "The redundancy_mode ${var.redundancy_mode} keeps ${local.copies} copies in different fault zones but there are only ${local.zone_count}; add subnets in more AZs, more instances, or set zone_by_availability_zone = false."
    }

    precondition {
      condition     = var.private_ips == null ? true : length(var.private_ips) == var.instance_count
      error_message = "The private_ips must have exactly instance_count entries."
    }
  }
}

resource "aws_volume_attachment" "data" {
  count = var.instance_count

  # Shows up as an NVMe device on Nitro instances; the bootstrap script finds it by the
  # volume ID in its serial number, not by this name.
  device_name                    = "/dev/sdf"
  volume_id                      = aws_ebs_volume.data[count.index].id
  instance_id                    = aws_instance.fdb[count.index].id
  stop_instance_before_detaching = true
}

# --- cluster file for the agents

resource "aws_ssm_parameter" "cluster_file" {
  name        = local.parameter_name
  description = "FoundationDB cluster file of ${var.name} (strata metastore)"
  type        = "SecureString"
  key_id      = var.kms_key_arn
  value       = local.cluster_file
  tags        = var.tags
}
