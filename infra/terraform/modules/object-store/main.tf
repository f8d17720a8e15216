# The archive bucket: closed segments as Parquet, written by the agents' tiering workers
# and read back by replays and analytics engines.

resource "aws_s3_bucket" "archive" {
  #checkov:skip=CKV_AWS_144:Cross-region replication is a disaster-recovery choice (second region, second bill) left to the platform; the archive can be replicated with a separate aws_s3_bucket_replication_configuration.
  #checkov:skip=CKV2_AWS_62:Nothing consumes bucket events; the agents track archived objects in the metastore.
  bucket        = var.bucket_name
  force_destroy = var.force_destroy
  tags          = var.tags
}

resource "aws_s3_bucket_ownership_controls" "archive" {
  bucket = aws_s3_bucket.archive.id

  rule {
    object_ownership = "BucketOwnerEnforced"
  }
}

resource "aws_s3_bucket_public_access_block" "archive" {
  bucket                  = aws_s3_bucket.archive.id
  block_public_acls       = true
  block_public_policy     = true
  ignore_public_acls      = true
  restrict_public_buckets = true
}

resource "aws_s3_bucket_server_side_encryption_configuration" "archive" {
  bucket = aws_s3_bucket.archive.id

  rule {
    apply_server_side_encryption_by_default {
      sse_algorithm     = "aws:kms"
      kms_master_key_id = var.kms_key_arn
    }
    # One data key per bucket instead of per object: far fewer KMS requests for
    # thousands of segment uploads.
    bucket_key_enabled = true
  }
}

resource "aws_s3_bucket_versioning" "archive" {
  bucket = aws_s3_bucket.archive.id

  versioning_configuration {
    status = var.versioning_enabled ? "Enabled" : "Suspended"
  }
}

resource "aws_s3_bucket_lifecycle_configuration" "archive" {
  bucket = aws_s3_bucket.archive.id

  rule {
    id     = "abort-incomplete-multipart-uploads"
    status = "Enabled"

    filter {}

    abort_incomplete_multipart_upload {
      days_after_initiation = var.abort_incomplete_multipart_upload_days
    }
  }

  rule {
    id     = "expire-orphans"
    status = "Enabled"

    filter {
      prefix = var.orphan_prefix
    }

    expiration {
      days = var.orphan_expiration_days
    }
  }

  rule {
    id     = "expire-noncurrent-versions"
    status = var.versioning_enabled ? "Enabled" : "Disabled"

    filter {}

    noncurrent_version_expiration {
      noncurrent_days = var.noncurrent_version_expiration_days
    }

    # Delete markers left once every old version has expired.
    expiration {
      expired_object_delete_marker = true
    }
  }

  # Lifecycle rules on a versioned bucket must come after versioning is configured.
  depends_on = [aws_s3_bucket_versioning.archive]
}

resource "aws_s3_bucket_logging" "archive" {
  count = var.access_log_bucket == null ? 0 : 1

  bucket        = aws_s3_bucket.archive.id
  target_bucket = var.access_log_bucket
  target_prefix = var.access_log_prefix
}

data "aws_iam_policy_document" "archive" {
  statement {
    sid     = "DenyInsecureTransport"
    effect  = "Deny"
    actions = ["s3:*"]
    resources = [
      aws_s3_bucket.archive.arn,
      "${aws_s3_bucket.archive.arn}/*",
    ]

    principals {
      type        = "*"
      identifiers = ["*"]
    }

    condition {
      test     = "Bool"
      variable = "aws:SecureTransport"
      values   = ["false"]
    }
  }

  statement {
    sid     = "DenyOutdatedTls"
    effect  = "Deny"
    actions = ["s3:*"]
    resources = [
      aws_s3_bucket.archive.arn,
      "${aws_s3_bucket.archive.arn}/*",
    ]

    principals {
      type        = "*"
      identifiers = ["*"]
    }

    condition {
      test     = "NumericLessThan"
      variable = "s3:TlsVersion"
      values   = ["1.2"]
    }
  }
}

resource "aws_s3_bucket_policy" "archive" {
  bucket = aws_s3_bucket.archive.id
  policy = data.aws_iam_policy_document.archive.json

  # A policy put before the public access block can be rejected as public.
  depends_on = [aws_s3_bucket_public_access_block.archive]
}
