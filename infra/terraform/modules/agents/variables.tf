variable "name" {
  description = "Name prefix for the autoscaling group, launch template and IAM role."
  type        = string

  validation {
    condition     = can(regex("^[a-zA-Z0-9-]{1,32}$", var.name))
    error_message = "The name must be 1-32 characters of letters, digits and '-'."
  }
}

variable "subnet_ids" {
  description = "Private subnets the agents run in, one per availability zone; the AZ becomes each agent's rack."
  type        = list(string)

  validation {
    condition     = length(var.subnet_ids) >= 1
    error_message = "The subnet_ids needs at least one subnet."
  }
}

variable "security_group_ids" {
  description = "Security groups of the agents (the network module's agents_security_group_id)."
  type        = list(string)

  validation {
    condition     = length(var.security_group_ids) >= 1
    error_message = "The security_group_ids needs at least one security group."
  }
}

variable "target_group_arns" {
  description = "Load balancer target groups the agents register with (the network module's target_group_arn); their /readyz health check drives instance replacement."
  type        = list(string)
}

variable "agent_count" {
  description = "Number of agents (the autoscaling group's fixed size)."
  type        = number
  default     = 3

  validation {
    condition     = var.agent_count >= 1 && var.agent_count <= 100 && floor(var.agent_count) == var.agent_count
    error_message = "The agent_count must be a whole number from 1 to 100."
  }
}

variable "instance_type" {
  description = "Instance type with local NVMe instance storage for the log: the i4i or i7ie families."
  type        = string
  default     = "i4i.large"

  validation {
    condition     = can(regex("^(i4i|i7ie)\\.[0-9a-z]+$", var.instance_type))
    error_message = "The instance_type must be an i4i.* or i7ie.* type (local NVMe instance storage)."
  }
}

variable "ami_id" {
  description = "AMI for the agents (Debian 12 or another Debian/Ubuntu with systemd, cloud-init and glibc >= 2.36); null picks the latest official Debian 12 amd64 AMI."
  type        = string
  default     = null
}

variable "root_volume_size_gb" {
  description = "Size of the encrypted gp3 root volume (GiB). The log lives on instance storage, not here."
  type        = number
  default     = 30

  validation {
    condition     = var.root_volume_size_gb >= 8 && var.root_volume_size_gb <= 1024
    error_message = "The root_volume_size_gb must be between 8 and 1024."
  }
}

variable "ebs_kms_key_arn" {
  description = "Customer-managed KMS key for the root volumes; null uses the AWS-managed aws/ebs key."
  type        = string
  default     = null
}

variable "archive_bucket_name" {
  description = "Archive bucket (the object-store module's bucket_name)."
  type        = string
}

variable "archive_prefix" {
  description = "Key prefix in the archive bucket; the agents may read, write, delete and list only under it."
  type        = string
  default     = "archive"

  validation {
    condition     = can(regex("^[A-Za-z0-9!_.*'()-]+(/[A-Za-z0-9!_.*'()-]+)*$", var.archive_prefix))
    error_message = "The archive_prefix must be non-empty, with no leading, trailing or doubled '/'."
  }
}

variable "archive_kms_key_arn" {
  description = "Customer-managed KMS key of the archive bucket, if any (the object-store module's kms_key_arn); the agents get Decrypt/GenerateDataKey on it through S3 only."
  type        = string
  default     = null
}

variable "fdb_cluster_file_parameter_name" {
  description = "SSM parameter holding the FoundationDB cluster file (the metastore module's cluster_file_parameter_name)."
  type        = string
}

variable "fdb_cluster_file_parameter_arn" {
  description = "ARN of that parameter (the metastore module's cluster_file_parameter_arn); the only parameter the agents may read."
  type        = string
}

variable "fdb_cluster_file_kms_key_arn" {
  description = "Customer-managed KMS key of the cluster file parameter, if any; the agents get Decrypt on it through SSM only."
  type        = string
  default     = null
}

variable "fdb_prefix" {
  description = "The agents' fdb_prefix setting: the key prefix of this strata cluster in FoundationDB."
  type        = string
  default     = "strata"

  validation {
    condition     = length(var.fdb_prefix) > 0
    error_message = "The fdb_prefix must not be empty."
  }
}

variable "fdb_version" {
  description = "FoundationDB client version, equal to the servers' (the metastore module's fdb_version)."
  type        = string
  default     = "7.3.69"

  validation {
    condition     = can(regex("^7\\.3\\.[0-9]+$", var.fdb_version))
    error_message = "The fdb_version must be a 7.3.x release."
  }
}

variable "fdb_package_base_url" {
  description = "Where <version>/foundationdb-clients_<version>-1_amd64.deb is downloaded from; point it at an internal mirror if the agents have no internet egress."
  type        = string
  default     = "https://github.com/apple/foundationdb/releases/download"
}

variable "fdb_clients_deb_sha256" {
  description = "SHA-256 of foundationdb-clients_<fdb_version>-1_amd64.deb; the bootstrap stops on a mismatch."
  type        = string

  validation {
    condition     = can(regex("^[0-9a-f]{64}$", var.fdb_clients_deb_sha256))
    error_message = "The fdb_clients_deb_sha256 must be 64 lowercase hex digits."
  }
}

variable "strata_binary_s3_uri" {
  description = "s3://bucket/key of the `strata` binary (built with --features fdb for Debian bookworm/x86_64); null if the AMI already has /usr/local/bin/strata. The agents may read exactly this object."
  type        = string
  default     = null

  validation {
    condition     = var.strata_binary_s3_uri == null || can(regex("^s3://[a-z0-9.-]+/.+$", var.strata_binary_s3_uri))
    error_message = "The strata_binary_s3_uri must look like s3://bucket/key."
  }
}

variable "strata_binary_sha256" {
  description = "SHA-256 of the object at strata_binary_s3_uri; required with it."
  type        = string
  default     = null

  validation {
    condition     = var.strata_binary_sha256 == null || can(regex("^[0-9a-f]{64}$", var.strata_binary_sha256))
    error_message = "The strata_binary_sha256 must be 64 lowercase hex digits."
  }
}

variable "kafka_port" {
  description = "Kafka port the agents listen on and advertise."
  type        = number
  default     = 9092
}

variable "http_port" {
  description = "Port of the agents' HTTP API (/healthz, /readyz, /v1/tiering)."
  type        = number
  default     = 9644
}

variable "health_check_grace_period_seconds" {
  description = "Seconds after launch before failing load balancer health checks make the group replace an agent; covers package installation and the first start."
  type        = number
  default     = 600

  validation {
    condition     = var.health_check_grace_period_seconds >= 60
    error_message = "The health_check_grace_period_seconds must be at least 60."
  }
}

variable "stop_timeout_seconds" {
  description = "systemd TimeoutStopSec: how long strata may drain after SIGTERM before it is killed."
  type        = number
  default     = 120

  validation {
    condition     = var.stop_timeout_seconds >= 10 && var.stop_timeout_seconds <= 3600
    error_message = "The stop_timeout_seconds must be between 10 and 3600."
  }
}

variable "drain_timeout_seconds" {
  description = "How long a terminating agent may drain (move its leaderships and replicas to the other agents) before the autoscaling group terminates it anyway: the lifecycle hook's heartbeat timeout."
  type        = number
  default     = 1800

  validation {
    condition     = var.drain_timeout_seconds >= 60 && var.drain_timeout_seconds <= 7200
    error_message = "The drain_timeout_seconds must be between 60 and 7200 (the lifecycle hook's limits)."
  }
}

variable "log_filter" {
  description = "STRATA_LOG for the agents (tracing EnvFilter syntax, e.g. info or info,strata_tiering=debug)."
  type        = string
  default     = "info"
}

variable "extra_settings_toml" {
  description = "More TOML appended to /etc/strata/strata.toml (e.g. a [topic_defaults] table). Unknown keys stop the agent from starting."
  type        = string
  default     = ""
}

variable "additional_policy_arns" {
  description = "Extra IAM policies for the agents' role, e.g. AmazonSSMManagedInstanceCore for Session Manager access."
  type        = list(string)
  default     = []
}

variable "tags" {
  description = "Tags for every resource of this module; also propagated to the instances."
  type        = map(string)
  default     = {}
}
