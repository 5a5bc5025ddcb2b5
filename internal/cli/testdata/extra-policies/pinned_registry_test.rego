package daemonguard.policies.pinned_registry

test_foreign_image_denied if {
	count(violation) == 1 with input as {"object": {"spec": {"template": {"spec": {"containers": [{"name": "a", "image": "nginx:1"}]}}}}}
}

test_company_image_allowed if {
	count(violation) == 0 with input as {"object": {"spec": {"template": {"spec": {"containers": [{"name": "a", "image": "registry.example.com/nginx:1"}]}}}}}
}
