variable "region" {
  description = "AWS region of the whole deployment."
  type        = string
}

variable "name" {
  description = "Name of this strata cluster; prefixes every resource."
  type        = string
  default     = "strata"

  validation {
    condition     = can(regex("^[a-zA-Z0-9-]{1,20}$", var.name))
    error_message = "The name must be 1-20 characters of letters, digits and '-'."
  }
}

variable "vpc_id" {
  description = "Existing VPC to deploy into."
  type        = string
}

variable "private_subnet_ids" {
  description = "Private subnets, one per availability zone (three recommended); agents, FoundationDB and the load balancer use them."
  type        = list(string)

  validation {
    condition     = length(var.private_subnet_ids) >= 1
    error_message = "The private_subnet_ids needs at least one subnet."
  }
}

variable "client_cidr_blocks" {
  description = "IPv4 ranges of the Kafka clients."
  type        = list(string)
}

variable "admin_cidr_blocks" {
  description = "IPv4 ranges allowed to the agents' HTTP API."
  type        = list(string)
  default     = []
}

variable "bucket_name" {
  description = "Name of the archive bucket to create (globally unique)."
  type        = string
}

variable "agent_count" {
  description = "Number of strata agents."
  type        = number
  default     = 3
}

variable "agent_instance_type" {
  description = "Instance type of the agents (i4i or i7ie family)."
  type        = string
  default     = "i4i.large"
}

variable "fdb_instance_count" {
  description = "Number of FoundationDB hosts."
  type        = number
  default     = 3
}

variable "fdb_instance_type" {
  description = "Instance type of the FoundationDB hosts."
  type        = string
  default     = "m6i.large"
}

variable "fdb_redundancy_mode" {
  description = "FoundationDB redundancy mode: single, double or triple."
  type        = string
  default     = "double"
}

variable "fdb_storage_engine" {
  description = "FoundationDB storage engine: ssd-redwood-1, ssd-2 or memory."
  type        = string
  default     = "ssd-redwood-1"
}

variable "fdb_version" {
  description = "FoundationDB version (7.3.x) for servers and agents alike."
  type        = string
  default     = "7.3.69"
}

variable "fdb_clients_deb_sha256" {
  description = "SHA-256 of foundationdb-clients_<fdb_version>-1_amd64.deb, from the FoundationDB release page."
  type        = string
}

variable "fdb_server_deb_sha256" {
  description = "SHA-256 of foundationdb-server_<fdb_version>-1_amd64.deb, from the FoundationDB release page."
  type        = string
}

variable "strata_binary_s3_uri" {
  description = "s3://bucket/key of the strata binary (cargo build --release --features fdb, on Debian bookworm); null if the agent AMI contains it."
  type        = string
  default     = null
}

variable "strata_binary_sha256" {
  description = "SHA-256 of the binary at strata_binary_s3_uri."
  type        = string
  default     = null
}

variable "tags" {
  description = "Tags added to every resource (through the provider's default_tags)."
  type        = map(string)
  default     = {}
}
