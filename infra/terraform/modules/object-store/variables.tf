variable "bucket_name" {
  description = "Name of the archive bucket (globally unique)."
  type        = string

  validation {
    condition     = can(regex("^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$", var.bucket_name)) && !can(regex("\\.\\.", var.bucket_name))
    error_message = "The bucket_name must be a valid S3 bucket name: 3-63 characters of a-z, 0-9, '.' and '-', starting and ending with a letter or digit."
  }
}

variable "archive_prefix" {
  description = "Key prefix the agents archive under (the path part of their archive_url), without leading or trailing '/'."
  type        = string
  default     = "archive"

  validation {
    condition     = can(regex("^[A-Za-z0-9!_.*'()-]+(/[A-Za-z0-9!_.*'()-]+)*$", var.archive_prefix))
    error_message = "The archive_prefix must be non-empty, with no leading, trailing or doubled '/'."
  }
}

variable "kms_key_arn" {
  description = "Customer-managed KMS key for default encryption. null uses the AWS-managed aws/s3 key (SSE-KMS), which needs no key policy for the agents."
  type        = string
  default     = null

  validation {
    condition     = var.kms_key_arn == null || can(regex("^arn:aws[a-z-]*:kms:", var.kms_key_arn))
    error_message = "The kms_key_arn must be a KMS key ARN or null."
  }
}

variable "versioning_enabled" {
  description = "Keep previous versions of overwritten or deleted objects (recovers from accidental deletes). Noncurrent versions expire after noncurrent_version_expiration_days."
  type        = bool
  default     = true
}

variable "noncurrent_version_expiration_days" {
  description = "Days a noncurrent object version is kept when versioning is enabled."
  type        = number
  default     = 30

  validation {
    condition     = var.noncurrent_version_expiration_days >= 1 && floor(var.noncurrent_version_expiration_days) == var.noncurrent_version_expiration_days
    error_message = "The noncurrent_version_expiration_days must be a whole number of at least 1."
  }
}

variable "orphan_prefix" {
  description = "Key prefix for objects no manifest references any more (quarantined uploads, replaced compaction inputs); they expire after orphan_expiration_days."
  type        = string
  default     = "orphans/"

  validation {
    condition     = length(var.orphan_prefix) > 0 && endswith(var.orphan_prefix, "/") && !startswith(var.orphan_prefix, "/")
    error_message = "The orphan_prefix must be non-empty, end with '/' and not start with '/', so the rule cannot match the whole bucket."
  }
}

variable "orphan_expiration_days" {
  description = "Days after which objects under orphan_prefix are deleted."
  type        = number
  default     = 7

  validation {
    condition     = var.orphan_expiration_days >= 1 && floor(var.orphan_expiration_days) == var.orphan_expiration_days
    error_message = "The orphan_expiration_days must be a whole number of at least 1."
  }
}

variable "abort_incomplete_multipart_upload_days" {
  description = "Days after which unfinished multipart uploads (e.g. from an agent killed mid-upload) are aborted and their parts deleted."
  type        = number
  default     = 1

  validation {
    condition     = var.abort_incomplete_multipart_upload_days >= 1 && floor(var.abort_incomplete_multipart_upload_days) == var.abort_incomplete_multipart_upload_days
    error_message = "The abort_incomplete_multipart_upload_days must be a whole number of at least 1."
  }
}

variable "access_log_bucket" {
  description = "Existing bucket that receives S3 server access logs for this bucket; null disables access logging."
  type        = string
  default     = null
}

variable "access_log_prefix" {
  description = "Key prefix for access logs in access_log_bucket."
  type        = string
  default     = "s3-access/"
}

variable "force_destroy" {
  description = "Allow `terraform destroy` to delete a non-empty bucket. Leave false outside test accounts: the archive is the only copy of closed segments."
  type        = bool
  default     = false
}

variable "tags" {
  description = "Tags for every resource of this module."
  type        = map(string)
  default     = {}
}
