# Client-facing network for the agents.
#
# Kafka clients bootstrap through one NLB listener (any ready agent answers Metadata);
# after that they connect to each agent directly, at the private address the agent
# advertises. See README.md for why per-agent NLB listeners are not used.

locals {
  bootstrap_record = var.route53_zone_id != null && var.bootstrap_record_name != null
}

resource "aws_security_group" "nlb" {
  name_prefix = "${var.name}-nlb-"
  description = "strata bootstrap load balancer"
  vpc_id      = var.vpc_id
  tags        = merge(var.tags, { Name = "${var.name}-nlb" })

  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_security_group" "agents" {
  #checkov:skip=CKV2_AWS_5:Attached by the agents module (its launch template's network interface); checkov does not follow a module output into another module's input.
  name_prefix = "${var.name}-agents-"
  description = "strata agents"
  vpc_id      = var.vpc_id
  tags        = merge(var.tags, { Name = "${var.name}-agents" })

  lifecycle {
    create_before_destroy = true
  }
}

# --- load balancer: clients in, agents out

resource "aws_vpc_security_group_ingress_rule" "nlb_kafka_cidr" {
  for_each = toset(var.client_cidr_blocks)

  security_group_id = aws_security_group.nlb.id
  description       = "Kafka bootstrap from clients"
  ip_protocol       = "tcp"
  from_port         = var.kafka_port
  to_port           = var.kafka_port
  cidr_ipv4         = each.value
}

resource "aws_vpc_security_group_ingress_rule" "nlb_kafka_sg" {
  count = length(var.client_security_group_ids)

  security_group_id            = aws_security_group.nlb.id
  description                  = "Kafka bootstrap from client security group"
  ip_protocol                  = "tcp"
  from_port                    = var.kafka_port
  to_port                      = var.kafka_port
  referenced_security_group_id = var.client_security_group_ids[count.index]
}

resource "aws_vpc_security_group_egress_rule" "nlb_to_agents" {
  for_each = toset([tostring(var.kafka_port), tostring(var.http_port)])

  security_group_id            = aws_security_group.nlb.id
  description                  = "Forwarded traffic and health checks to agents"
  ip_protocol                  = "tcp"
  from_port                    = tonumber(each.value)
  to_port                      = tonumber(each.value)
  referenced_security_group_id = aws_security_group.agents.id
}

# --- agents: Kafka from clients and the load balancer, HTTP from the load balancer
# and admins, HTTP(S) out. FoundationDB access is added by the metastore module.

resource "aws_vpc_security_group_ingress_rule" "agents_kafka_cidr" {
  for_each = toset(var.client_cidr_blocks)

  security_group_id = aws_security_group.agents.id
  description       = "Kafka from clients (direct, to the advertised address)"
  ip_protocol       = "tcp"
  from_port         = var.kafka_port
  to_port           = var.kafka_port
  cidr_ipv4         = each.value
}

resource "aws_vpc_security_group_ingress_rule" "agents_kafka_sg" {
  count = length(var.client_security_group_ids)

  security_group_id            = aws_security_group.agents.id
  description                  = "Kafka from client security group"
  ip_protocol                  = "tcp"
  from_port                    = var.kafka_port
  to_port                      = var.kafka_port
  referenced_security_group_id = var.client_security_group_ids[count.index]
}

resource "aws_vpc_security_group_ingress_rule" "agents_from_nlb" {
  for_each = toset([tostring(var.kafka_port), tostring(var.http_port)])

  security_group_id            = aws_security_group.agents.id
  description                  = "Bootstrap traffic and health checks from the load balancer"
  ip_protocol                  = "tcp"
  from_port                    = tonumber(each.value)
  to_port                      = tonumber(each.value)
  referenced_security_group_id = aws_security_group.nlb.id
}

resource "aws_vpc_security_group_ingress_rule" "agents_http_admin" {
  for_each = toset(var.admin_cidr_blocks)

  security_group_id = aws_security_group.agents.id
  description       = "HTTP API from administrators"
  ip_protocol       = "tcp"
  from_port         = var.http_port
  to_port           = var.http_port
  cidr_ipv4         = each.value
}

resource "aws_vpc_security_group_egress_rule" "agents_https" {
  for_each = toset(var.egress_cidr_blocks)

  security_group_id = aws_security_group.agents.id
  description       = "HTTPS: S3, SSM, FoundationDB packages"
  ip_protocol       = "tcp"
  from_port         = 443
  to_port           = 443
  cidr_ipv4         = each.value
}

resource "aws_vpc_security_group_egress_rule" "agents_http" {
  for_each = toset(var.egress_cidr_blocks)

  security_group_id = aws_security_group.agents.id
  description       = "HTTP: Debian package mirrors (packages are signed)"
  ip_protocol       = "tcp"
  from_port         = 80
  to_port           = 80
  cidr_ipv4         = each.value
}

# --- bootstrap load balancer

resource "aws_lb" "bootstrap" {
  #checkov:skip=CKV_AWS_91:NLB access logs are written only for TLS listeners; this listener is plain TCP (strata does not speak TLS yet), so there is nothing to log.
  name_prefix                      = substr(var.name, 0, 6)
  load_balancer_type               = "network"
  internal                         = var.internal
  subnets                          = var.subnet_ids
  security_groups                  = [aws_security_group.nlb.id]
  enable_cross_zone_load_balancing = true
  enable_deletion_protection       = var.deletion_protection
  tags                             = merge(var.tags, { Name = "${var.name}-bootstrap" })
}

resource "aws_lb_target_group" "bootstrap" {
  name_prefix          = substr(var.name, 0, 6)
  vpc_id               = var.vpc_id
  target_type          = "instance"
  protocol             = "TCP"
  port                 = var.kafka_port
  deregistration_delay = var.deregistration_delay_seconds
  tags                 = merge(var.tags, { Name = "${var.name}-bootstrap" })

  # Ready means the Kafka listener accepts and the metastore answers; the ASG uses
  # this check (health_check_type = "ELB") to replace broken agents.
  health_check {
    protocol            = "HTTP"
    port                = tostring(var.http_port)
    path                = "/readyz"
    matcher             = "200"
    interval            = 10
    timeout             = 5
    healthy_threshold   = 2
    unhealthy_threshold = 3
  }

  lifecycle {
    create_before_destroy = true
  }
}

# Plain TCP: strata has no TLS listener yet, and terminating TLS here would protect only
# bootstrap connections, not the direct ones to each agent.
resource "aws_lb_listener" "bootstrap" {
  load_balancer_arn = aws_lb.bootstrap.arn
  protocol          = "TCP"
  port              = var.kafka_port
  tags              = var.tags

  default_action {
    type             = "forward"
    target_group_arn = aws_lb_target_group.bootstrap.arn
  }
}

resource "aws_route53_record" "bootstrap" {
  count = local.bootstrap_record ? 1 : 0

  zone_id = var.route53_zone_id
  name    = var.bootstrap_record_name
  type    = "A"

  alias {
    name                   = aws_lb.bootstrap.dns_name
    zone_id                = aws_lb.bootstrap.zone_id
    evaluate_target_health = true
  }
}
