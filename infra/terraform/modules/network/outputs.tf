output "bootstrap_servers" {
  description = "Kafka bootstrap address (host:port) for clients: the Route 53 name when one was created, else the load balancer's DNS name."
  value       = "${local.bootstrap_record ? var.bootstrap_record_name : aws_lb.bootstrap.dns_name}:${var.kafka_port}"
}

output "load_balancer_arn" {
  description = "ARN of the bootstrap network load balancer."
  value       = aws_lb.bootstrap.arn
}

output "load_balancer_dns_name" {
  description = "DNS name of the bootstrap network load balancer."
  value       = aws_lb.bootstrap.dns_name
}

output "target_group_arn" {
  description = "Target group the agents' autoscaling group registers with (Kafka port, /readyz health check)."
  value       = aws_lb_target_group.bootstrap.arn
}

output "agents_security_group_id" {
  description = "Security group for the agents; pass it to the agents module and, as a client, to the metastore module."
  value       = aws_security_group.agents.id
}

output "load_balancer_security_group_id" {
  description = "Security group of the bootstrap load balancer."
  value       = aws_security_group.nlb.id
}

output "kafka_port" {
  description = "Kafka port of the agents."
  value       = var.kafka_port
}

output "http_port" {
  description = "HTTP API port of the agents."
  value       = var.http_port
}
