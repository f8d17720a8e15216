terraform {
  required_version = ">= 1.5"

  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = "~> 5.40"
    }
    random = {
      source  = "hashicorp/random"
      version = "~> 3.5"
    }
  }

  # State holds the cluster file and resource IDs: keep it in a shared, encrypted,
  # locked backend, for example:
  # backend "s3" {
  #   bucket         = "my-terraform-state"
  #   key            = "strata/example.tfstate"
  #   region         = "eu-west-1"
  #   encrypt        = true
  #   dynamodb_table = "terraform-locks"
  # }
}

provider "aws" {
  region = var.region

  default_tags {
    tags = merge(var.tags, { "strata:cluster" = var.name })
  }
}
