output "bucket_name" {
  description = "Name of the archive bucket."
  value       = aws_s3_bucket.archive.id
}

output "bucket_arn" {
  description = "ARN of the archive bucket."
  value       = aws_s3_bucket.archive.arn
}

output "bucket_region" {
  description = "Region of the archive bucket (the agents' AWS_REGION)."
  value       = aws_s3_bucket.archive.region
}

output "archive_prefix" {
  description = "Key prefix the agents archive under."
  value       = var.archive_prefix
}

output "archive_url" {
  description = "Value for the agents' archive_url setting."
  value       = "s3://${aws_s3_bucket.archive.id}/${var.archive_prefix}"
}

output "kms_key_arn" {
  description = "Customer-managed KMS key encrypting the bucket, or null when the AWS-managed aws/s3 key is used."
  value       = var.kms_key_arn
}
