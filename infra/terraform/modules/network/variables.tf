variable "name" {
  description = "Name prefix for the load balancer, target group and security groups."
  type        = string

  validation {
    condition     = can(regex("^[a-zA-Z0-9-]{1,20}$", var.name))
    error_message = "The name must be 1-20 characters of letters, digits and '-' (it prefixes load balancer names, which are limited to 32)."
  }
}

variable "vpc_id" {
  description = "VPC of the agents and the load balancer."
  type        = string
}

variable "subnet_ids" {
  description = "Subnets of the load balancer, one per availability zone the agents run in."
  type        = list(string)

  validation {
    condition     = length(var.subnet_ids) >= 1
    error_message = "The subnet_ids needs at least one subnet."
  }
}

variable "internal" {
  description = "Whether the load balancer is internal (private addresses only). Agents advertise private addresses, so clients must reach the VPC either way."
  type        = bool
  default     = true
}

variable "client_cidr_blocks" {
  description = "IPv4 ranges of Kafka clients, allowed to the bootstrap listener and to every agent's Kafka port."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for c in var.client_cidr_blocks : can(cidrnetmask(c))])
    error_message = "The client_cidr_blocks must be IPv4 CIDR blocks."
  }
}

variable "client_security_group_ids" {
  description = "Security groups of Kafka clients, allowed like client_cidr_blocks."
  type        = list(string)
  default     = []
}

variable "admin_cidr_blocks" {
  description = "IPv4 ranges allowed to the agents' HTTP API (health, /v1/tiering)."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for c in var.admin_cidr_blocks : can(cidrnetmask(c))])
    error_message = "The admin_cidr_blocks must be IPv4 CIDR blocks."
  }
}

variable "egress_cidr_blocks" {
  description = "Where the agents may open HTTP(S) connections: S3, SSM and package mirrors (directly, through NAT or through VPC endpoints)."
  type        = list(string)
  default     = ["0.0.0.0/0"]

  validation {
    condition     = alltrue([for c in var.egress_cidr_blocks : can(cidrnetmask(c))])
    error_message = "The egress_cidr_blocks must be IPv4 CIDR blocks."
  }
}

variable "kafka_port" {
  description = "Kafka port of the agents and of the bootstrap listener."
  type        = number
  default     = 9092
}

variable "http_port" {
  description = "Port of the agents' HTTP API; the load balancer health-checks GET /readyz on it."
  type        = number
  default     = 9644
}

variable "deletion_protection" {
  description = "Protect the load balancer from deletion (its DNS name is the clients' bootstrap address)."
  type        = bool
  default     = true
}

variable "deregistration_delay_seconds" {
  description = "How long a deregistering agent keeps its bootstrap connections; Kafka bootstrap connections are short, so this can be small."
  type        = number
  default     = 30

  validation {
    condition     = var.deregistration_delay_seconds >= 0 && var.deregistration_delay_seconds <= 3600
    error_message = "The deregistration_delay_seconds must be between 0 and 3600."
  }
}

variable "route53_zone_id" {
  description = "Route 53 hosted zone for a friendly bootstrap name; null creates no record."
  type        = string
  default     = null
}

variable "bootstrap_record_name" {
  description = "Record name (in route53_zone_id) aliased to the load balancer, e.g. kafka.internal.example.com."
  type        = string
  default     = null
}

variable "tags" {
  description = "Tags for every resource of this module."
  type        = map(string)
  default     = {}
}
