output "cluster_file" {
  description = "Contents of the FoundationDB cluster file (description:ID@coordinators)."
  value       = local.cluster_file
}

output "cluster_file_parameter_name" {
  description = "SSM parameter (SecureString) holding the cluster file; the agents read it at boot."
  value       = aws_ssm_parameter.cluster_file.name
}

output "cluster_file_parameter_arn" {
  description = "ARN of the cluster file parameter, for ssm:GetParameter grants."
  value       = aws_ssm_parameter.cluster_file.arn
}

output "coordinators" {
  description = "Coordinator addresses (ip:port)."
  value       = local.coordinators
}

output "private_ips" {
  description = "Fixed private IP of each FoundationDB host, in instance order."
  value       = [for h in local.hosts : h.private_ip]
}

output "instance_ids" {
  description = "EC2 instance IDs of the FoundationDB hosts."
  value       = aws_instance.fdb[*].id
}

output "security_group_id" {
  description = "Security group of the FoundationDB hosts."
  value       = aws_security_group.fdb.id
}

output "fdb_version" {
  description = "FoundationDB version installed on the hosts; clients must use the same 7.3 client library."
  value       = var.fdb_version
}

output "kms_key_arn" {
  description = "Customer-managed KMS key of the volumes and the SSM parameter, or null for AWS-managed keys."
  value       = var.kms_key_arn
}
