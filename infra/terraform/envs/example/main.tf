# A complete strata deployment in an existing VPC: the archive bucket, the bootstrap
# load balancer and security groups, a FoundationDB metastore and the agents.

module "object_store" {
  source = "../../modules/object-store"

  bucket_name = var.bucket_name
}

module "network" {
  source = "../../modules/network"

  name               = var.name
  vpc_id             = var.vpc_id
  subnet_ids         = var.private_subnet_ids
  client_cidr_blocks = var.client_cidr_blocks
  admin_cidr_blocks  = var.admin_cidr_blocks
}

module "metastore" {
  source = "../../modules/metastore-fdb"

  name                      = var.name
  vpc_id                    = var.vpc_id
  subnet_ids                = var.private_subnet_ids
  instance_count            = var.fdb_instance_count
  instance_type             = var.fdb_instance_type
  redundancy_mode           = var.fdb_redundancy_mode
  storage_engine            = var.fdb_storage_engine
  fdb_version               = var.fdb_version
  fdb_clients_deb_sha256    = var.fdb_clients_deb_sha256
  fdb_server_deb_sha256     = var.fdb_server_deb_sha256
  client_security_group_ids = [module.network.agents_security_group_id]
}

module "agents" {
  source = "../../modules/agents"

  name                            = var.name
  subnet_ids                      = var.private_subnet_ids
  security_group_ids              = [module.network.agents_security_group_id]
  target_group_arns               = [module.network.target_group_arn]
  agent_count                     = var.agent_count
  instance_type                   = var.agent_instance_type
  archive_bucket_name             = module.object_store.bucket_name
  archive_prefix                  = module.object_store.archive_prefix
  archive_kms_key_arn             = module.object_store.kms_key_arn
  fdb_cluster_file_parameter_name = module.metastore.cluster_file_parameter_name
  fdb_cluster_file_parameter_arn  = module.metastore.cluster_file_parameter_arn
  fdb_cluster_file_kms_key_arn    = module.metastore.kms_key_arn
  fdb_version                     = module.metastore.fdb_version
  fdb_clients_deb_sha256          = var.fdb_clients_deb_sha256
  strata_binary_s3_uri            = var.strata_binary_s3_uri
  strata_binary_sha256            = var.strata_binary_sha256
  kafka_port                      = module.network.kafka_port
  http_port                       = module.network.http_port
}
