variable "name" {
  description = "Name prefix for the instances, security group, IAM role and SSM parameter."
  type        = string

  validation {
    condition     = can(regex("^[a-zA-Z0-9-]{1,32}$", var.name))
    error_message = "The name must be 1-32 characters of letters, digits and '-'."
  }
}

variable "vpc_id" {
  description = "VPC of the FoundationDB instances."
  type        = string
}

variable "subnet_ids" {
  description = "Private subnets for the instances; instance i goes to subnet_ids[i % length(subnet_ids)]. Use one per availability zone."
  type        = list(string)

  validation {
    condition     = length(var.subnet_ids) >= 1
    error_message = "The subnet_ids needs at least one subnet."
  }
}

variable "instance_count" {
  description = "Number of FoundationDB hosts."
  type        = number
  default     = 3

  validation {
    condition     = var.instance_count >= 1 && var.instance_count <= 64 && floor(var.instance_count) == var.instance_count
    error_message = "The instance_count must be a whole number from 1 to 64."
  }
}

variable "instance_type" {
  description = "EC2 instance type of the FoundationDB hosts."
  type        = string
  default     = "m6i.large"
}

variable "processes_per_instance" {
  description = "fdbserver processes per host (ports 4500 upwards). One per physical core is FoundationDB's usual sizing."
  type        = number
  default     = 1

  validation {
    condition     = var.processes_per_instance >= 1 && var.processes_per_instance <= 32 && floor(var.processes_per_instance) == var.processes_per_instance
    error_message = "The processes_per_instance must be a whole number from 1 to 32."
  }
}

variable "storage_engine" {
  description = "Storage engine for `configure new`: ssd-redwood-1 (Redwood B-tree), ssd-2 (SQLite B-tree) or memory (data set must fit in RAM)."
  type        = string
  default     = "ssd-redwood-1"

  validation {
    condition     = contains(["ssd-redwood-1", "ssd-2", "memory"], var.storage_engine)
    error_message = "The storage_engine must be one of ssd-redwood-1, ssd-2, memory."
  }
}

variable "redundancy_mode" {
  description = "Redundancy mode for `configure new`: single (1 copy), double (2) or triple (3). Each copy needs its own fault zone (see zone_by_availability_zone)."
  type        = string
  default     = "double"

  validation {
    condition     = contains(["single", "double", "triple"], var.redundancy_mode)
    error_message = "The redundancy_mode must be one of single, double, triple."
  }
}

variable "coordinator_count" {
  description = "Number of coordinators: the first N instances' first processes. Odd, and at most instance_count; a majority must be up for the database to be available."
  type        = number
  default     = 3

  validation {
    condition     = contains([1, 3, 5, 7, 9], var.coordinator_count)
    error_message = "The coordinator_count must be 1, 3, 5, 7 or 9."
  }
}

variable "zone_by_availability_zone" {
  description = "Use the availability zone as FoundationDB's fault zone, so copies of data land in different AZs. Needs at least as many AZs as copies (redundancy_mode); false makes each host its own zone."
  type        = bool
  default     = true
}

variable "private_ip_host_offset" {
  description = "Instance i gets host number offset + floor(i / length(subnet_ids)) of its subnet's CIDR (cidrhost), so the cluster file is known at plan time. Keep that range free of other ENIs."
  type        = number
  default     = 10

  validation {
    condition     = var.private_ip_host_offset >= 4 && floor(var.private_ip_host_offset) == var.private_ip_host_offset
    error_message = "The private_ip_host_offset must be a whole number of at least 4 (AWS reserves the first four addresses of a subnet)."
  }
}

variable "private_ips" {
  description = "Explicit private IPs, one per instance in order (each inside its subnet); overrides private_ip_host_offset when set."
  type        = list(string)
  default     = null
}

variable "data_volume_size_gb" {
  description = "Size of each host's encrypted gp3 data volume (GiB). It outlives instance replacement."
  type        = number
  default     = 200

  validation {
    condition     = var.data_volume_size_gb >= 8 && var.data_volume_size_gb <= 16384
    error_message = "The data_volume_size_gb must be between 8 and 16384."
  }
}

variable "data_volume_iops" {
  description = "Provisioned IOPS of each gp3 data volume (3000-16000)."
  type        = number
  default     = 6000

  validation {
    condition     = var.data_volume_iops >= 3000 && var.data_volume_iops <= 16000
    error_message = "The data_volume_iops must be between 3000 and 16000."
  }
}

variable "data_volume_throughput_mbps" {
  description = "Provisioned throughput of each gp3 data volume in MiB/s (125-1000)."
  type        = number
  default     = 250

  validation {
    condition     = var.data_volume_throughput_mbps >= 125 && var.data_volume_throughput_mbps <= 1000
    error_message = "The data_volume_throughput_mbps must be between 125 and 1000."
  }
}

variable "root_volume_size_gb" {
  description = "Size of each host's encrypted root volume (GiB); FoundationDB's trace logs live there."
  type        = number
  default     = 30
}

variable "kms_key_arn" {
  description = "Customer-managed KMS key for the EBS volumes and the SSM parameter; null uses the AWS-managed aws/ebs and aws/ssm keys."
  type        = string
  default     = null
}

variable "ami_id" {
  description = "AMI for the hosts (Debian 12 or another Debian/Ubuntu with systemd and cloud-init); null picks the latest official Debian 12 amd64 AMI."
  type        = string
  default     = null
}

variable "fdb_version" {
  description = "FoundationDB server and client version, 7.3.x (the agents are built against API 730)."
  type        = string
  default     = "7.3.69"

  validation {
    condition     = can(regex("^7\\.3\\.[0-9]+$", var.fdb_version))
    error_message = "The fdb_version must be a 7.3.x release."
  }
}

variable "fdb_package_base_url" {
  description = "Where <version>/foundationdb-{clients,server}_<version>-1_amd64.deb are downloaded from; point it at an internal mirror if the hosts have no internet egress."
  type        = string
  default     = "https://github.com/apple/foundationdb/releases/download"
}

variable "fdb_clients_deb_sha256" {
  description = "SHA-256 of foundationdb-clients_<fdb_version>-1_amd64.deb; installation stops on a mismatch."
  type        = string

  validation {
    condition     = can(regex("^[0-9a-f]{64}$", var.fdb_clients_deb_sha256))
    error_message = "The fdb_clients_deb_sha256 must be 64 lowercase hex digits."
  }
}

variable "fdb_server_deb_sha256" {
  description = "SHA-256 of foundationdb-server_<fdb_version>-1_amd64.deb; installation stops on a mismatch."
  type        = string

  validation {
    condition     = can(regex("^[0-9a-f]{64}$", var.fdb_server_deb_sha256))
    error_message = "The fdb_server_deb_sha256 must be 64 lowercase hex digits."
  }
}

variable "client_security_group_ids" {
  description = "Security groups allowed to reach FoundationDB (the agents'; add an admin host's for fdbcli). Each also gets an egress rule to FoundationDB."
  type        = list(string)
}

variable "egress_cidr_blocks" {
  description = "Where the hosts may open HTTP(S) connections to download packages (directly, through NAT or a mirror)."
  type        = list(string)
  default     = ["0.0.0.0/0"]

  validation {
    condition     = alltrue([for c in var.egress_cidr_blocks : can(cidrnetmask(c))])
    error_message = "The egress_cidr_blocks must be IPv4 CIDR blocks."
  }
}

variable "cluster_file_parameter_name" {
  description = "SSM parameter (SecureString) holding the cluster file; null uses /<name>/fdb/cluster-file."
  type        = string
  default     = null
}

variable "additional_policy_arns" {
  description = "Extra IAM policies for the hosts' role, e.g. AmazonSSMManagedInstanceCore for Session Manager access."
  type        = list(string)
  default     = []
}

variable "tags" {
  description = "Tags for every resource of this module."
  type        = map(string)
  default     = {}
}
