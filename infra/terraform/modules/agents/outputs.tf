output "autoscaling_group_name" {
  description = "Name of the agents' autoscaling group."
  value       = aws_autoscaling_group.agents.name
}

output "launch_template_id" {
  description = "ID of the agents' launch template."
  value       = aws_launch_template.agents.id
}

output "launch_template_latest_version" {
  description = "Latest launch template version (used by instances launched from now on)."
  value       = aws_launch_template.agents.latest_version
}

output "iam_role_arn" {
  description = "ARN of the agents' IAM role."
  value       = aws_iam_role.agents.arn
}

output "iam_role_name" {
  description = "Name of the agents' IAM role, for attaching further policies."
  value       = aws_iam_role.agents.name
}

output "archive_url" {
  description = "The archive_url the agents are configured with."
  value       = local.archive_url
}
