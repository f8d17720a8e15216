# Least privilege for the agents: the archive prefix, the cluster file parameter, and
# (only when configured) the customer-managed keys behind them and the binary object.

locals {
  archive_bucket_arn = "arn:${data.aws_partition.current.partition}:s3:::${var.archive_bucket_name}"
  binary_object_arn = (
    var.strata_binary_s3_uri == null
    ? null
    : "arn:${data.aws_partition.current.partition}:s3:::${trimprefix(var.strata_binary_s3_uri, "s3://")}"
  )
  dns_suffix = data.aws_partition.current.dns_suffix
}

data "aws_iam_policy_document" "assume_ec2" {
  statement {
    actions = ["sts:AssumeRole"]

    principals {
      type        = "Service"
      identifiers = ["ec2.${local.dns_suffix}"]
    }
  }
}

data "aws_iam_policy_document" "agents" {
  statement {
    sid       = "ListArchivePrefix"
    actions   = ["s3:ListBucket"]
    resources = [local.archive_bucket_arn]

    condition {
      test     = "StringLike"
      variable = "s3:prefix"
      values   = [var.archive_prefix, "${var.archive_prefix}/*"]
    }
  }

  statement {
    sid       = "ReadWriteArchiveObjects"
    actions   = ["s3:GetObject", "s3:PutObject", "s3:DeleteObject"]
    resources = ["${local.archive_bucket_arn}/${var.archive_prefix}/*"]
  }

  statement {
    sid       = "ReadClusterFile"
    actions   = ["ssm:GetParameter"]
    resources = [var.fdb_cluster_file_parameter_arn]
  }

  dynamic "statement" {
    for_each = var.archive_kms_key_arn == null ? [] : [var.archive_kms_key_arn]

    content {
      sid       = "ArchiveKeyThroughS3"
      actions   = ["kms:Decrypt", "kms:GenerateDataKey"]
      resources = [statement.value]

      condition {
        test     = "StringEquals"
        variable = "kms:ViaService"
        values   = ["s3.${local.region}.${local.dns_suffix}"]
      }
    }
  }

  dynamic "statement" {
    for_each = var.fdb_cluster_file_kms_key_arn == null ? [] : [var.fdb_cluster_file_kms_key_arn]

    content {
      sid       = "ClusterFileKeyThroughSsm"
      actions   = ["kms:Decrypt"]
      resources = [statement.value]

      condition {
        test     = "StringEquals"
        variable = "kms:ViaService"
        values   = ["ssm.${local.region}.${local.dns_suffix}"]
      }
    }
  }

  dynamic "statement" {
    for_each = local.binary_object_arn == null ? [] : [local.binary_object_arn]

    content {
      sid       = "ReadStrataBinary"
      actions   = ["s3:GetObject"]
      resources = [statement.value]
    }
  }
}

resource "aws_iam_role" "agents" {
  name_prefix        = "${substr(var.name, 0, 20)}-agent-"
  description        = "strata agents"
  assume_role_policy = data.aws_iam_policy_document.assume_ec2.json
  tags               = var.tags
}

resource "aws_iam_role_policy" "agents" {
  name   = "strata-agent"
  role   = aws_iam_role.agents.id
  policy = data.aws_iam_policy_document.agents.json
}

resource "aws_iam_role_policy_attachment" "additional" {
  count = length(var.additional_policy_arns)

  role       = aws_iam_role.agents.name
  policy_arn = var.additional_policy_arns[count.index]
}

resource "aws_iam_instance_profile" "agents" {
  name_prefix = "${substr(var.name, 0, 20)}-agent-"
  role        = aws_iam_role.agents.name
  tags        = var.tags
}

# strata-drain-watch finds its group and completes the drain hook on its own instance.
# DescribeAutoScalingInstances has no resource-level permissions.
data "aws_iam_policy_document" "drain" {
  #checkov:skip=CKV_AWS_356:DescribeAutoScalingInstances supports no resource-level permissions; it only reads which group an instance is in.
  statement {
    sid       = "FindOwnGroup"
    actions   = ["autoscaling:DescribeAutoScalingInstances"]
    resources = ["*"]
  }

  statement {
    sid       = "CompleteDrainHook"
    actions   = ["autoscaling:CompleteLifecycleAction", "autoscaling:RecordLifecycleActionHeartbeat"]
    resources = [aws_autoscaling_group.agents.arn]
  }
}

resource "aws_iam_role_policy" "drain" {
  name   = "strata-agent-drain"
  role   = aws_iam_role.agents.id
  policy = data.aws_iam_policy_document.drain.json
}
