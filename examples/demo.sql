-- The demo schema: a small product catalogue captured by Debezium (database `demo`).
CREATE DATABASE IF NOT EXISTS demo CHARACTER SET utf8mb4;
USE demo;
DROP TABLE IF EXISTS order_lines;
DROP TABLE IF EXISTS orders;
DROP TABLE IF EXISTS customers;
DROP TABLE IF EXISTS products;
CREATE TABLE products (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
  sku VARCHAR(32) NOT NULL UNIQUE,
  name VARCHAR(200) NOT NULL,
  price DECIMAL(10,2) NOT NULL,
  stock INT NOT NULL DEFAULT 0,
  tags SET('new','sale','eco','gift') NOT NULL DEFAULT '',
  attributes JSON NULL,
  active TINYINT(1) NOT NULL DEFAULT 1,
  updated_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6),
  created_at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP
) ENGINE=InnoDB;
INSERT INTO products (sku, name, price, stock, tags, attributes) VALUES
  ('TEA-001', 'Sencha green tea 100 g', 7.90, 120, 'eco', '{"origin": "Shizuoka", "organic": true}'),
  ('TEA-002', 'Assam black tea 250 g', 9.50, 80, '', '{"origin": "Assam"}'),
  ('MUG-010', 'Stoneware mug, 350 ml', 14.00, 40, 'new,gift', '{"colour": "slate"}'),
  ('POT-100', 'Cast-iron teapot 0.8 l', 49.99, 12, 'gift', '{"colour": "black", "capacity_ml": 800}'),
  ('FIL-005', 'Paper filters ×100', 3.25, 500, 'sale,eco', NULL),
  ('KET-200', 'Gooseneck kettle 1 l', 64.00, 7, 'new', '{"watts": 1200}'),
  ('CUP-020', 'Tasting cups, set of 4', 22.40, 25, '', '{"material": "porcelain"}'),
  ('SCL-001', 'Pocket scale 0.1 g', 18.75, 30, 'sale', NULL);

-- Orders, indexed as joined documents: each with its customer and its lines, each line with
-- its product (examples/demo.toml, "Joined documents" in the README).
CREATE TABLE customers (
  id INT NOT NULL PRIMARY KEY,
  name VARCHAR(100) NOT NULL,
  city VARCHAR(60) NOT NULL
) ENGINE=InnoDB;
CREATE TABLE orders (
  id INT NOT NULL PRIMARY KEY,
  customer_id INT NOT NULL,
  status ENUM('open', 'paid', 'shipped') NOT NULL DEFAULT 'open',
  placed_at DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  FOREIGN KEY (customer_id) REFERENCES customers (id)
) ENGINE=InnoDB;
CREATE TABLE order_lines (
  order_id INT NOT NULL,
  line INT NOT NULL,
  product_id BIGINT UNSIGNED NOT NULL,
  qty INT NOT NULL,
  PRIMARY KEY (order_id, line),
  FOREIGN KEY (order_id) REFERENCES orders (id) ON DELETE CASCADE,
  FOREIGN KEY (product_id) REFERENCES products (id)
) ENGINE=InnoDB;
INSERT INTO customers VALUES (1, 'Ada', 'London'), (2, 'Grace', 'Arlington'), (3, 'Kenji', 'Kyoto');
INSERT INTO orders (id, customer_id, status) VALUES (100, 1, 'paid'), (101, 2, 'open'), (102, 3, 'shipped');
INSERT INTO order_lines VALUES (100, 1, 1, 2), (100, 2, 3, 1), (101, 1, 4, 1), (101, 2, 2, 3),
  (102, 1, 1, 1), (102, 2, 5, 2), (102, 3, 6, 1);
